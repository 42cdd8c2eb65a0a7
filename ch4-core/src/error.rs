//! The one error type of the device.
//!
//! Every failure that a user or a peer can cause comes back as an [`Error`] whose [`ErrorKind`]
//! maps to an MPI error class ([`ErrorKind::mpi_class`]). Errors are cold: the type is one
//! pointer wide so that `Result<T, Error>` stays small on the hot path.

use std::fmt;

use crate::types::Status;

/// What went wrong, in MPI's vocabulary. Stable across releases; match on it, not on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A rank outside the communicator (MPI_ERR_RANK).
    Rank,
    /// A negative tag other than the wildcard, or one above the tag upper bound (MPI_ERR_TAG).
    Tag,
    /// A communicator that does not exist or was freed (MPI_ERR_COMM).
    Comm,
    /// A count or length that cannot be represented or does not fit (MPI_ERR_COUNT).
    Count,
    /// A malformed buffer or layout (MPI_ERR_BUFFER).
    Buffer,
    /// A datatype handle that names no datatype, or one not committed (MPI_ERR_TYPE).
    Type,
    /// A collective's root outside its communicator (MPI_ERR_ROOT).
    Root,
    /// A reduction operation that does not exist or does not apply (MPI_ERR_OP).
    Op,
    /// An invalid argument that fits no narrower class (MPI_ERR_ARG).
    Arg,
    /// The message was longer than the receive buffer (MPI_ERR_TRUNCATE).
    Truncate,
    /// A request handle that is stale, freed or never existed (MPI_ERR_REQUEST).
    Request,
    /// An operation is still pending where it must have completed (MPI_ERR_PENDING).
    Pending,
    /// The peer process failed or its connection broke (MPIX_ERR_PROC_FAILED).
    PeerFailed,
    /// A resource limit was reached: the request pool, a queue, memory (MPI_ERR_NO_MEM).
    Exhausted,
    /// A ready-mode send arrived before a matching receive was posted (MPI_ERR_OTHER).
    ReadyNotPosted,
    /// A peer sent bytes that do not parse as our protocol (MPI_ERR_OTHER).
    Protocol,
    /// The transport failed in a way not caused by the peer (MPI_ERR_OTHER).
    Transport,
    /// A broken invariant inside the device; please report it (MPI_ERR_INTERN).
    Internal,
    /// Some requests of a set completed with errors; each one's own is in its status
    /// ([`Error::statuses`]), as MPI reports it (MPI_ERR_IN_STATUS).
    InStatus,
}

impl ErrorKind {
    /// The MPI error class this kind reports as (values from MPICH's `mpi.h`).
    pub const fn mpi_class(self) -> i32 {
        match self {
            ErrorKind::Buffer => 1,
            ErrorKind::Count => 2,
            ErrorKind::Type => 3,
            ErrorKind::Root => 7,
            ErrorKind::Op => 9,
            ErrorKind::Tag => 4,
            ErrorKind::Comm => 5,
            ErrorKind::Rank => 6,
            ErrorKind::Request => 7,
            ErrorKind::Arg => 12,
            ErrorKind::Truncate => 14,
            ErrorKind::ReadyNotPosted | ErrorKind::Protocol | ErrorKind::Transport => 15,
            ErrorKind::Internal => 16,
            ErrorKind::InStatus => 17,
            ErrorKind::Pending => 18,
            ErrorKind::Exhausted => 34,
            ErrorKind::PeerFailed => 101,
        }
    }

    /// A short description of the kind, used when an error carries no message of its own.
    pub const fn describe(self) -> &'static str {
        match self {
            ErrorKind::Rank => "invalid rank",
            ErrorKind::Tag => "invalid tag",
            ErrorKind::Comm => "invalid communicator",
            ErrorKind::Count => "invalid count",
            ErrorKind::Buffer => "invalid buffer or layout",
            ErrorKind::Type => "invalid datatype",
            ErrorKind::Root => "invalid root",
            ErrorKind::Op => "invalid operation",
            ErrorKind::Arg => "invalid argument",
            ErrorKind::Truncate => "message truncated",
            ErrorKind::Request => "invalid request",
            ErrorKind::Pending => "operation pending",
            ErrorKind::PeerFailed => "peer process failed",
            ErrorKind::Exhausted => "resource exhausted",
            ErrorKind::ReadyNotPosted => "ready send without a posted receive",
            ErrorKind::Protocol => "protocol violation by peer",
            ErrorKind::Transport => "transport failure",
            ErrorKind::Internal => "internal error",
            ErrorKind::InStatus => "error in a request's status",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// An error from the device: a kind, a human-readable detail and, when the error completed an
/// operation, that operation's status as data.
///
/// Boxed so that `Result<T, Error>` costs one word; errors are never on the fast path.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    kind: ErrorKind,
    detail: String,
    payload: Payload,
}

/// What an error keeps of the operations it ended, beside its text.
#[derive(Clone, PartialEq, Eq)]
enum Payload {
    None,
    /// The status of the one operation the error completed (MPI keeps a failed receive's
    /// source, tag and count in its status).
    Status(Status),
    /// The statuses of every request of a set, in the set's order ([`ErrorKind::InStatus`]).
    Statuses(Vec<Status>),
}

impl Error {
    /// An error of `kind` with a detail message saying which value was wrong and why.
    #[cold]
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            detail: detail.into(),
            payload: Payload::None,
        }))
    }

    /// The error that completed an operation with `status` (whose `error` says what went
    /// wrong): a truncated receive, a ready send that found no receive, a failed peer.
    #[cold]
    pub fn with_status(kind: ErrorKind, detail: impl Into<String>, status: Status) -> Self {
        let mut e = Error::new(kind, detail);
        e.0.payload = Payload::Status(status);
        e
    }

    /// An [`ErrorKind::InStatus`] error for a set of requests of which at least one failed:
    /// `statuses` holds every request's status in the set's order, each failed one with its
    /// `error` set (MPI_ERR_IN_STATUS).
    #[cold]
    pub fn in_status(detail: impl Into<String>, statuses: Vec<Status>) -> Self {
        let mut e = Error::new(ErrorKind::InStatus, detail);
        e.0.payload = Payload::Statuses(statuses);
        e
    }

    /// The kind, for matching and for the MPI error class.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The detail message given when the error was made.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// The status of the operation this error completed — source, tag and the bytes that
    /// arrived for a truncated receive — or `None` for an error that completed nothing (a bad
    /// argument, a failing device).
    pub fn status(&self) -> Option<&Status> {
        match &self.0.payload {
            Payload::Status(st) => Some(st),
            _ => None,
        }
    }

    /// For an [`ErrorKind::InStatus`] error, every request's status in the set's order.
    pub fn statuses(&self) -> Option<&[Status]> {
        match &self.0.payload {
            Payload::Statuses(v) => Some(v),
            _ => None,
        }
    }

    /// The same error with `context` put before its detail (which rank, which request).
    #[cold]
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.0.detail = format!("{context}: {}", self.0.detail);
        self
    }
}

impl From<ErrorKind> for Error {
    #[cold]
    fn from(kind: ErrorKind) -> Self {
        Error::new(kind, kind.describe())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}: {})", self.0.kind, self.0.detail)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.detail == self.0.kind.describe() {
            f.write_str(&self.0.detail)
        } else {
            write!(f, "{}: {}", self.0.kind, self.0.detail)
        }
    }
}

impl std::error::Error for Error {}

/// The device's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for returning an error of a kind with a formatted detail.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)+) => {
        return Err($crate::Error::new($crate::ErrorKind::$kind, format!($($arg)+)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_one_word() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
        assert_eq!(
            std::mem::size_of::<Result<()>>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn kinds_map_to_mpi_classes() {
        assert_eq!(ErrorKind::Truncate.mpi_class(), 14);
        assert_eq!(ErrorKind::Rank.mpi_class(), 6);
        let e = Error::new(ErrorKind::Rank, "rank 9 outside communicator of size 4");
        assert_eq!(e.kind(), ErrorKind::Rank);
        assert!(e.to_string().contains("rank 9"));
        assert_eq!(Error::from(ErrorKind::Tag).to_string(), "invalid tag");
    }
}
