//! What failed, and PMIx's status for it.

use pmix_sys::pmix_status_t;

/// A PMIx call that failed: what was asked, and the status the library returned (a negative
/// PMIx code, described with the library's own words in [`std::fmt::Display`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    what: String,
    status: pmix_status_t,
}

impl Error {
    pub(crate) fn new(what: impl Into<String>, status: pmix_status_t) -> Error {
        Error {
            what: what.into(),
            status,
        }
    }

    /// The PMIx status code (`PMIX_ERR_*`; 0 when the failure was this crate's own check,
    /// such as a key with a NUL byte).
    pub fn status(&self) -> i32 {
        self.status
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "{}", self.what)
        } else {
            write!(
                f,
                "{}: {} (PMIx status {})",
                self.what,
                pmix_sys::error_string(self.status),
                self.status
            )
        }
    }
}

impl std::error::Error for Error {}
