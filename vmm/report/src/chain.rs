//! An error and its causes on one line (`a: b: c`), for a log line, a warning or a run's
//! outcome: an error's own message leaves its causes to the chain, so printing its Display
//! alone would lose them and printing them inside it would say them twice.

/// `e` and each of its causes in turn, joined by `: `.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once_in_order() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot install the vCPU thread's seccomp filter")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("Invalid argument"));
        assert_eq!(
            with_causes(&e),
            "cannot install the vCPU thread's seccomp filter: Invalid argument"
        );
    }
}
