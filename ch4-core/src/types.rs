//! The small vocabulary every layer shares: ranks, tags, context ids, process ids, envelopes and
//! the status a completed receive reports.

/// A rank within a communicator. `i32` like MPI's `int`, so the wildcards fit.
pub type Rank = i32;
/// A message tag. Valid user tags are `0..=` the job's limit (at most [`TAG_UB`]);
/// [`ANY_TAG`] only on receives.
pub type Tag = i32;
/// The context id that separates the traffic of communicators (and of their collectives).
pub type ContextId = u32;
/// A global process id: the index of a process in the job ("world"), fixed for its lifetime.
pub type Gpid = u32;
/// Names the handler an active message is delivered to on the receiving side.
pub type HandlerId = u8;

/// Wildcard source for receives and probes (MPI_ANY_SOURCE). The three sentinels have the
/// values of the MPI standard ABI, so that the C library passes ranks and tags through as they
/// are.
pub const ANY_SOURCE: Rank = -1;
/// Wildcard tag for receives and probes (MPI_ANY_TAG).
pub const ANY_TAG: Tag = -2;
/// The null process: a send to it or a receive from it completes at once with no data.
pub const PROC_NULL: Rank = -3;
/// The largest tag ch4's core carries (over shared memory and the active-message netmods),
/// an upper bound of a job's MPI_TAG_UB, not the job's limit itself: a netmod that matches
/// in the network holds fewer tag bits beside the context and the source (2^24 - 1 over
/// libfabric and UCX), and a job's limit is what all its engines carry — ask the job
/// (`ch4::Context::tag_ub`, `Device::tag_ub`, `MPI_TAG_UB` in C). MPI requires at least
/// 32767.
pub const TAG_UB: Tag = (1 << 30) - 1;

/// The matching key of a message: which communicator context, which sender (as a rank in
/// that communicator) and which tag. A posted receive may hold wildcards in `source`/`tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Context id of the communicator (point-to-point or collective context).
    pub context: ContextId,
    /// Rank of the sender in that communicator, or [`ANY_SOURCE`] on a receive.
    pub source: Rank,
    /// Tag, or [`ANY_TAG`] on a receive.
    pub tag: Tag,
}

impl Envelope {
    /// Whether a receive with envelope `self` (wildcards allowed) accepts a message `msg`.
    #[inline(always)]
    pub fn accepts(&self, msg: &Envelope) -> bool {
        self.context == msg.context
            && (self.source == ANY_SOURCE || self.source == msg.source)
            && (self.tag == ANY_TAG || self.tag == msg.tag)
    }
}

/// What a completed receive (or a probe) learned about its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank in the communicator.
    pub source: Rank,
    /// The message's tag.
    pub tag: Tag,
    /// Bytes delivered into the receive buffer (for a probe: bytes in the message).
    pub bytes: usize,
    /// Whether the operation was cancelled instead of completed.
    pub cancelled: bool,
    /// The error this operation ended with, if any (for example [`crate::ErrorKind::Truncate`]).
    pub error: Option<crate::ErrorKind>,
}

impl Status {
    /// The status of an operation that completed with no message (sends, PROC_NULL).
    pub const EMPTY: Status = Status {
        source: PROC_NULL,
        tag: ANY_TAG,
        bytes: 0,
        cancelled: false,
        error: None,
    };

    /// A successful status for `bytes` bytes from `source` with `tag`.
    #[inline(always)]
    pub const fn ok(source: Rank, tag: Tag, bytes: usize) -> Status {
        Status {
            source,
            tag,
            bytes,
            cancelled: false,
            error: None,
        }
    }

    /// How many whole elements of `elem_size` bytes arrived (MPI_Get_count); `None` when the byte
    /// count is not a multiple of the element size (MPI_UNDEFINED).
    pub fn count(&self, elem_size: usize) -> Option<usize> {
        if elem_size == 0 {
            return Some(0);
        }
        (self.bytes % elem_size == 0).then_some(self.bytes / elem_size)
    }
}

/// The send modes of MPI point-to-point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SendMode {
    /// May complete before the receive is posted (buffered eagerly or by rendezvous).
    Standard = 0,
    /// Completes only after a matching receive has started (MPI_Ssend).
    Synchronous = 1,
    /// The user asserts the receive is already posted; the receiver reports an error if not.
    Ready = 2,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_accept() {
        let msg = Envelope {
            context: 4,
            source: 2,
            tag: 7,
        };
        let exact = msg;
        assert!(exact.accepts(&msg));
        assert!(Envelope {
            source: ANY_SOURCE,
            ..msg
        }
        .accepts(&msg));
        assert!(Envelope {
            tag: ANY_TAG,
            ..msg
        }
        .accepts(&msg));
        assert!(!Envelope { context: 5, ..msg }.accepts(&msg));
        assert!(!Envelope { tag: 8, ..msg }.accepts(&msg));
    }

    #[test]
    fn count_of_elements() {
        let s = Status::ok(0, 0, 12);
        assert_eq!(s.count(4), Some(3));
        assert_eq!(s.count(5), None);
    }
}
