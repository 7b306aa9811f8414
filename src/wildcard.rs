//! AWS's wildcard match, as EC2 filter values and IAM policy actions and resources use it:
//! `*` stands for any run of characters (the empty one too), `?` for exactly one. The
//! simulated EC2 filters with it, and the IAM policy check in the moto suite evaluates the
//! shipped policy with it, so both read patterns the way AWS does.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen, and where in `text` it started matching, to backtrack to.
    let (mut star, mut star_ti) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            star_ti = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            star_ti += 1;
            ti = star_ti;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_and_question_marks_match_as_aws_reads_them() {
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(matches("kerf-*", "kerf-cluster"));
        assert!(!matches("kerf-*", "other"));
        assert!(matches("a?c", "abc") && !matches("a?c", "ac"));
        assert!(matches("exact", "exact") && !matches("exact", "exactly"));
        assert!(matches("ec2:Describe*", "ec2:DescribeInstances"));
        assert!(matches(
            "arn:aws:ec2:*:*:instance/*",
            "arn:aws:ec2:us-east-1:1:instance/i-1"
        ));
        assert!(!matches(
            "arn:aws:ec2:*:*:instance/*",
            "arn:aws:ec2:us-east-1:1:volume/v"
        ));
    }
}
