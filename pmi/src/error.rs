//! The one error type of the crate.
//!
//! Everything a process manager, a peer or a caller can get wrong comes back as an [`Error`]
//! whose [`ErrorKind`] says what class of thing failed, so the device above can map it to an MPI
//! error class without parsing messages. Nothing in this crate panics on bad input.

use std::fmt;
use std::io;

use crate::wire::WireError;

/// What went wrong. Match on this, not on the detail text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bytes on the PMI connection do not form a valid PMI-1 message (see [`WireError`]).
    Wire,
    /// An argument the caller passed cannot be used: a key or value too long, or containing a
    /// space, `=` in a key, or a control character; or a launcher rank count out of range.
    InvalidArgument,
    /// The operating system failed a read, write, connect or fd operation, or a call the
    /// launcher needs to set up a job (signal handlers, sockets).
    Io,
    /// The process manager closed the PMI connection (it exited, or killed the job).
    Closed,
    /// The process manager answered with something this client did not ask for.
    Protocol,
    /// The process manager understood the request and refused it (`rc` other than 0).
    Server,
    /// `PMI_FD`, `PMI_PORT`, `PMI_ID`, `PMI_RANK` or `PMI_SIZE` is set but unusable.
    Environment,
    /// The call is not valid in the current state: a client call before `init` or after
    /// `finalize`, or a launcher job started while another runs in the same process.
    State,
    /// The request is valid PMI but this implementation does not serve it (`spawn`).
    Unsupported,
}

impl ErrorKind {
    /// A short description of the kind, used when an error carries no detail of its own.
    pub const fn describe(self) -> &'static str {
        match self {
            ErrorKind::Wire => "malformed PMI message",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Io => "I/O error on the PMI connection",
            ErrorKind::Closed => "the process manager closed the PMI connection",
            ErrorKind::Protocol => "unexpected reply from the process manager",
            ErrorKind::Server => "the process manager refused the request",
            ErrorKind::Environment => "invalid PMI environment",
            ErrorKind::State => "call not valid in this state",
            ErrorKind::Unsupported => "unsupported PMI operation",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// An error from the PMI client, server or wire codec: a kind, a detail saying which value was
/// wrong and why, and the underlying cause where there is one.
///
/// Boxed so that `Result<T, Error>` stays one word wide; errors are never on a hot path.
pub struct Error(Box<Inner>);

struct Inner {
    kind: ErrorKind,
    detail: String,
    source: Option<Source>,
}

enum Source {
    Io(io::Error),
    Wire(WireError),
}

impl Error {
    /// An error of `kind` with a detail message.
    #[cold]
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            detail: detail.into(),
            source: None,
        }))
    }

    /// An I/O error, with `context` saying what was being attempted.
    #[cold]
    pub fn io(context: impl Into<String>, err: io::Error) -> Self {
        let kind = match err.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => ErrorKind::Closed,
            _ => ErrorKind::Io,
        };
        Error(Box::new(Inner {
            kind,
            detail: context.into(),
            source: Some(Source::Io(err)),
        }))
    }

    /// A wire-format error, with `context` saying where the bytes came from.
    #[cold]
    pub fn wire(context: impl Into<String>, err: WireError) -> Self {
        Error(Box::new(Inner {
            kind: ErrorKind::Wire,
            detail: context.into(),
            source: Some(Source::Wire(err)),
        }))
    }

    /// The kind, for matching and for mapping to an MPI error class.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The detail message given when the error was made.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// The wire error underneath, when the kind is [`ErrorKind::Wire`].
    pub fn wire_error(&self) -> Option<&WireError> {
        match &self.0.source {
            Some(Source::Wire(w)) => Some(w),
            _ => None,
        }
    }
}

impl From<WireError> for Error {
    #[cold]
    fn from(err: WireError) -> Self {
        Error::wire("malformed PMI message", err)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}: {}", self.0.kind, self.0.detail)?;
        match &self.0.source {
            Some(Source::Io(e)) => write!(f, ": {e:?})"),
            Some(Source::Wire(w)) => write!(f, ": {w:?})"),
            None => f.write_str(")"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.detail.is_empty() {
            f.write_str(self.0.kind.describe())?;
        } else {
            f.write_str(&self.0.detail)?;
        }
        match &self.0.source {
            Some(Source::Io(e)) => write!(f, ": {e}"),
            Some(Source::Wire(w)) => write!(f, ": {w}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.source {
            Some(Source::Io(e)) => Some(e),
            Some(Source::Wire(w)) => Some(w),
            None => None,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_that_mean_a_closed_peer_are_closed() {
        let e = Error::io("reading", io::Error::from(io::ErrorKind::UnexpectedEof));
        assert_eq!(e.kind(), ErrorKind::Closed);
        let e = Error::io("reading", io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(e.to_string().starts_with("reading: "));
    }

    #[test]
    fn wire_errors_keep_their_cause() {
        let e = Error::from(WireError::MissingCmd);
        assert_eq!(e.kind(), ErrorKind::Wire);
        assert_eq!(e.wire_error(), Some(&WireError::MissingCmd));
        assert!(std::error::Error::source(&e).is_some());
    }
}
