//! libfabric's error codes as ch4's [`Error`]: the call's name and `fi_strerror`'s text in the
//! detail, the kind from the code. Errors are cold: nothing here is on the data path's
//! success branch.

use ch4_core::{Error, ErrorKind};
use libfabric_sys::{
    errstr, FI_ECONNABORTED, FI_ECONNREFUSED, FI_ECONNRESET, FI_EHOSTUNREACH, FI_EINVAL,
    FI_EMSGSIZE, FI_ENOMEM, FI_ENOTCONN, FI_ESHUTDOWN, FI_ETOOSMALL, FI_ETRUNC,
};

/// The error of libfabric call `call` that returned `code` (negative, as libfabric returns
/// errors; either sign is accepted): "fi_tsend: Connection refused (-111)".
#[cold]
#[inline(never)]
pub fn fi_error(call: &str, code: isize) -> Error {
    let positive = code.unsigned_abs().min(i32::MAX as usize) as i32;
    Error::new(
        kind_of(positive),
        format!("{call}: {} (-{positive})", errstr(positive)),
    )
}

/// The kind of a (positive) libfabric error code.
pub(crate) fn kind_of(code: i32) -> ErrorKind {
    match code {
        FI_ENOMEM => ErrorKind::Exhausted,
        FI_EINVAL | FI_ETOOSMALL => ErrorKind::Arg,
        FI_EMSGSIZE => ErrorKind::Count,
        FI_ETRUNC => ErrorKind::Truncate,
        FI_ECONNREFUSED | FI_ECONNRESET | FI_ECONNABORTED | FI_EHOSTUNREACH | FI_ENOTCONN
        | FI_ESHUTDOWN => ErrorKind::PeerFailed,
        _ => ErrorKind::Transport,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libfabric_sys::{FI_EAGAIN, FI_EOTHER};

    #[test]
    fn detail_names_the_call_and_the_code() {
        let e = fi_error("fi_tsend", -(FI_ECONNREFUSED as isize));
        assert_eq!(e.kind(), ErrorKind::PeerFailed);
        assert!(e.detail().starts_with("fi_tsend: "), "{}", e.detail());
        assert!(e.detail().ends_with("(-111)"), "{}", e.detail());
        assert_eq!(
            fi_error("x", FI_ENOMEM as isize).kind(),
            ErrorKind::Exhausted
        );
        assert_eq!(
            fi_error("x", -(FI_EOTHER as isize)).kind(),
            ErrorKind::Transport
        );
        assert_eq!(
            fi_error("x", -(FI_EAGAIN as isize)).kind(),
            ErrorKind::Transport
        );
        assert_eq!(fi_error("x", isize::MIN).kind(), ErrorKind::Transport);
    }
}
