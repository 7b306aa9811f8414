//! Multipart MIME archives, the user-data container AL2 and AL2023 nodes read (cloud-init
//! and nodeadm). Users may supply their own archive or a bare script; kerf appends its own
//! part and writes the whole with the `//` boundary upstream uses. Line endings are
//! normalised to `\n`, as cloud-init does not need `\r\n` and upstream strips them too.

use thiserror::Error;

/// The boundary of archives kerf writes.
pub const BOUNDARY: &str = "//";

pub const CONTENT_TYPE_SHELL: &str = "text/x-shellscript; charset=\"us-ascii\"";
pub const CONTENT_TYPE_NODECONFIG: &str = "application/node.eks.aws";

/// One part of an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MimePart {
    /// Header lines other than the content type, as written (`Name: value`).
    pub extra_headers: Vec<String>,
    pub content_type: String,
    pub body: String,
}

impl MimePart {
    pub fn new(content_type: &str, body: &str) -> Self {
        Self {
            extra_headers: Vec::new(),
            content_type: content_type.to_owned(),
            body: body.to_owned(),
        }
    }
}

/// Why user data is not a readable MIME archive.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum MimeError {
    #[error("user data has no Content-Type header")]
    MissingContentType,
    #[error("user data is not a multipart MIME archive (Content-Type {0:?})")]
    NotMultipart(String),
    #[error("user data's Content-Type {0:?} has no boundary parameter")]
    MissingBoundary(String),
    #[error("user data part {index} has no Content-Type header")]
    PartWithoutContentType { index: usize },
}

/// Whether text starts like a MIME document (rather than a script or config).
pub fn looks_like_mime(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("MIME-Version:") || t.starts_with("Content-Type:")
}

/// Reads the parts of a multipart archive.
pub fn parse(text: &str) -> Result<Vec<MimePart>, MimeError> {
    let text = text.replace("\r\n", "\n");
    let (headers, body) = split_headers(text.trim_start());
    let content_type =
        header_value(&headers, "content-type").ok_or(MimeError::MissingContentType)?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return Err(MimeError::NotMultipart(content_type));
    }
    let boundary =
        boundary_param(&content_type).ok_or(MimeError::MissingBoundary(content_type.clone()))?;
    let delimiter = format!("--{boundary}");
    let closing = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in body.split('\n') {
        if line.trim_end() == closing {
            if let Some(lines) = current.take() {
                parts.push(part_from_lines(&lines, parts.len())?);
            }
            break;
        }
        if line.trim_end() == delimiter {
            if let Some(lines) = current.take() {
                parts.push(part_from_lines(&lines, parts.len())?);
            }
            current = Some(Vec::new());
            continue;
        }
        if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if let Some(lines) = current.take() {
        parts.push(part_from_lines(&lines, parts.len())?);
    }
    Ok(parts)
}

fn split_headers(text: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let headers = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    (headers, body)
}

fn header_value(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

fn boundary_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn part_from_lines(lines: &[&str], index: usize) -> Result<MimePart, MimeError> {
    let blank = lines
        .iter()
        .position(|l| l.trim().is_empty())
        .unwrap_or(lines.len());
    let mut content_type = None;
    let mut extra_headers = Vec::new();
    for line in &lines[..blank] {
        match line.split_once(':') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("content-type") => {
                content_type = Some(v.trim().to_owned());
            }
            _ => extra_headers.push(line.to_string()),
        }
    }
    let body_lines = lines.get(blank + 1..).unwrap_or(&[]);
    // The line break before a delimiter belongs to the delimiter (RFC 2046).
    let body = body_lines.join("\n");
    Ok(MimePart {
        extra_headers,
        content_type: content_type.ok_or(MimeError::PartWithoutContentType { index })?,
        body,
    })
}

/// Writes an archive of `parts` with kerf's boundary.
pub fn serialize(parts: &[MimePart]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for part in parts {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {}\n",
            part.content_type
        ));
        for header in &part.extra_headers {
            out.push_str(header);
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&part.body);
        // The line break before the next delimiter belongs to the delimiter.
        out.push('\n');
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_parts() {
        let parts = vec![
            MimePart::new(CONTENT_TYPE_SHELL, "#!/bin/bash\necho hi\n"),
            MimePart::new(CONTENT_TYPE_NODECONFIG, "kind: NodeConfig\n"),
        ];
        let text = serialize(&parts);
        assert!(
            text.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"")
        );
        let back = parse(&text).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].content_type, CONTENT_TYPE_SHELL);
        assert_eq!(back[0].body, "#!/bin/bash\necho hi\n");
        assert_eq!(back[1].body, "kind: NodeConfig\n");
    }

    #[test]
    fn reads_foreign_boundaries_and_crlf() {
        let text = "Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\nMIME-Version: 1.0\r\n\r\n\
                    --BOUNDARY\r\nContent-Type: text/x-shellscript\r\nX-Extra: 1\r\n\r\necho a\r\n--BOUNDARY--\r\n";
        let parts = parse(text).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].body, "echo a");
        assert_eq!(parts[0].extra_headers, ["X-Extra: 1"]);
    }

    #[test]
    fn rejects_what_is_not_an_archive() {
        assert_eq!(parse("echo hi"), Err(MimeError::MissingContentType));
        assert!(matches!(
            parse("Content-Type: text/plain\n\nx"),
            Err(MimeError::NotMultipart(_))
        ));
        assert!(matches!(
            parse("Content-Type: multipart/mixed\n\nx"),
            Err(MimeError::MissingBoundary(_))
        ));
        assert!(looks_like_mime("  MIME-Version: 1.0"));
        assert!(!looks_like_mime("#!/bin/bash"));
    }
}
