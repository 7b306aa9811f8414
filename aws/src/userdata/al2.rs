//! Amazon Linux 2 user data: a MIME archive whose last part runs `/etc/eks/bootstrap.sh`
//! with the cluster's facts and the kubelet flags; the user's user data (a script or an
//! archive) comes first, so it runs before the node joins.

use super::mime::{self, CONTENT_TYPE_SHELL, MimePart};
use super::{BootstrapOptions, UserDataError};

pub fn render(opts: &BootstrapOptions) -> Result<String, UserDataError> {
    let mut parts = custom_parts(opts.custom_user_data.as_deref())?;
    parts.push(MimePart::new(CONTENT_TYPE_SHELL, &bootstrap_script(opts)));
    Ok(mime::serialize(&parts))
}

/// The user's user data as archive parts: an archive as-is, anything else as one script.
pub(super) fn custom_parts(custom: Option<&str>) -> Result<Vec<MimePart>, UserDataError> {
    match custom {
        None => Ok(Vec::new()),
        Some(text) if text.trim().is_empty() => Ok(Vec::new()),
        Some(text) if mime::looks_like_mime(text) => Ok(mime::parse(text)?),
        Some(text) => Ok(vec![MimePart::new(CONTENT_TYPE_SHELL, text)]),
    }
}

fn bootstrap_script(opts: &BootstrapOptions) -> String {
    let mut s = String::from("#!/bin/bash -xe\n");
    s.push_str("exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n");
    s.push_str(&format!(
        "/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}'",
        opts.cluster_name, opts.cluster_endpoint
    ));
    if let Some(ca) = &opts.ca_bundle {
        s.push_str(&format!(" --b64-cluster-ca '{ca}'"));
    }
    if opts.is_ipv6() {
        s.push_str(" \\\n--ip-family ipv6");
    }
    if let Some(dns) = opts.kubelet.cluster_dns.first() {
        s.push_str(&format!(" \\\n--dns-cluster-ip '{dns}'"));
    }
    if opts.kubelet.max_pods.is_some() {
        // kerf computes max pods itself; bootstrap.sh must not override it from its table.
        s.push_str(" \\\n--use-max-pods false");
    }
    let args = opts.kubelet_extra_args();
    if !args.is_empty() {
        s.push_str(&format!(" \\\n--kubelet-extra-args '{}'", args.join(" ")));
    }
    if opts.instance_store_raid0 {
        s.push_str(" \\\n--local-disks raid0");
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;

    /// Splits a shell command line as bash would (quotes, backslash-newline continuations).
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut cur = String::new();
        let mut in_word = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    in_word = true;
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                        cur.push(c);
                    }
                }
                '"' => {
                    in_word = true;
                    for c in chars.by_ref() {
                        if c == '"' {
                            break;
                        }
                        cur.push(c);
                    }
                }
                '\\' if chars.peek() == Some(&'\n') => {
                    chars.next();
                }
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                }
                c => {
                    in_word = true;
                    cur.push(c);
                }
            }
        }
        if in_word {
            words.push(cur);
        }
        words
    }

    fn bootstrap_words(user_data: &str) -> Vec<String> {
        let parts = mime::parse(user_data).unwrap();
        let script = &parts.last().unwrap().body;
        let start = script.find("/etc/eks/bootstrap.sh").unwrap();
        shell_words(&script[start..])
    }

    fn flag<'a>(words: &'a [String], name: &str) -> Option<&'a str> {
        words
            .iter()
            .position(|w| w == name)
            .map(|i| words[i + 1].as_str())
    }

    #[test]
    fn bootstrap_arguments_carry_the_cluster_facts() {
        let words = bootstrap_words(&render(&options()).unwrap());
        assert_eq!(words[0], "/etc/eks/bootstrap.sh");
        assert_eq!(words[1], "demo");
        assert_eq!(
            flag(&words, "--apiserver-endpoint"),
            Some("https://demo.eks.example")
        );
        assert_eq!(flag(&words, "--b64-cluster-ca"), Some("Y2EtYnVuZGxlCg=="));
        assert_eq!(flag(&words, "--dns-cluster-ip"), Some("10.100.0.10"));
        assert_eq!(flag(&words, "--use-max-pods"), Some("false"));
        assert_eq!(flag(&words, "--ip-family"), None);
        let kubelet = shell_words(flag(&words, "--kubelet-extra-args").unwrap());
        assert!(kubelet.contains(&"--max-pods=58".to_owned()));
        assert!(
            kubelet.contains(
                &"--node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default"
                    .to_owned()
            )
        );
        assert!(
            kubelet.contains(
                &"--register-with-taints=karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule"
                    .to_owned()
            )
        );
        assert!(kubelet.contains(&"--eviction-hard=memory.available<5%".to_owned()));
    }

    #[test]
    fn ipv6_and_raid0() {
        let mut o = options();
        o.kubelet.cluster_dns = vec!["fd00::a".into()];
        o.instance_store_raid0 = true;
        let words = bootstrap_words(&render(&o).unwrap());
        assert_eq!(flag(&words, "--ip-family"), Some("ipv6"));
        assert_eq!(flag(&words, "--local-disks"), Some("raid0"));
    }

    #[test]
    fn user_scripts_and_archives_run_first() {
        let mut o = options();
        o.custom_user_data = Some("#!/bin/bash\necho custom\n".into());
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].body, "#!/bin/bash\necho custom\n");
        assert!(parts[1].body.contains("/etc/eks/bootstrap.sh"));

        o.custom_user_data = Some(mime::serialize(&[
            MimePart::new("text/cloud-config", "packages: [jq]\n"),
            MimePart::new(CONTENT_TYPE_SHELL, "echo two\n"),
        ]));
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].content_type, "text/cloud-config");

        o.custom_user_data = Some("Content-Type: multipart/mixed\n\nbroken".into());
        assert!(matches!(render(&o), Err(UserDataError::CustomMime(_))));
    }
}
