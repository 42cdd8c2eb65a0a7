//! Settings this crate gives libfabric before its first call, to avoid known provider bugs of
//! the library actually linked.
//!
//! libfabric reads its providers' parameters from the environment (`fi_param_get`, a
//! `getenv`) when they initialise, during the process's first `fi_getinfo`; there is no API
//! to set them otherwise. So a workaround is an environment variable set once, before that
//! first call, and only when the user has not set the variable: a user's explicit choice wins.
//!
//! # Dynamic receive buffers in `tcp;ofi_rxm` before 1.18
//!
//! With `FI_OFI_RXM_ENABLE_DYN_RBUF` on (its default), rxm lets the tcp provider place an
//! incoming message straight into the application's buffer. When that buffer is too small, tcp
//! 1.17 reports `FI_ETRUNC` and then treats the stream as broken: every later message on the
//! endpoint is lost (libfabric issue 8274, "prov/tcp: truncation error disables ep", fixed in
//! 1.18 where a truncation no longer disables the connection). With the option off, rxm
//! receives into its own bounce buffers and truncates by copying (or, for rendezvous, by
//! reading less), which 1.17 handles correctly, and the bytes that fit are delivered. Measured
//! here with ch4's `osu_latency` over `tcp;ofi_rxm`: no difference at 8 B beyond the run-to-run
//! noise, and rendezvous sizes faster with the option off.
//!
//! # Segmentation and reassembly in `tcp;ofi_rxm` before 1.18
//!
//! Messages between the eager limit (16 KiB) and `FI_OFI_RXM_SAR_LIMIT` (128 KiB) travel in
//! segments reassembled by the receiver. In 1.17 a receive buffer smaller than such a message
//! crashes the process inside libfabric (a segmentation fault, found by this workspace's
//! truncation test at 100 000 bytes). Setting the SAR limit to the eager limit turns the
//! protocol off: those messages go by rxm's rendezvous (an RMA read), whose truncation works.
//! The price, measured with ch4's `osu_latency` over loopback: 32 KiB messages take about
//! twice as long (rendezvous costs a round trip more), 128 KiB ones are as fast or faster.
//! (The OFI netmod now sends every message longer than rxm's eager limit by its own RMA read,
//! so neither rxm protocol carries its messages; the setting stays for programs that use this
//! crate's provider layer directly.)

//! # Larger eager buffers in `tcp;ofi_rxm`: a choice left to the user
//!
//! rxm sends a message eagerly up to its buffer size (`FI_OFI_RXM_BUFFER_SIZE`, 16 KiB by
//! default); anything longer costs a round trip (the OFI netmod's own read: see
//! `netmod::read_above`, which follows the buffer size). With 64 KiB buffers, measured with
//! ch4's `osu_latency` and `osu_bw` over loopback (5 interleaved rounds): 32 KiB messages take
//! 0.37x the time and stream 2.3x faster, 64 KiB ones 0.57x and 1.6x, other sizes within the
//! noise. It is not the default: rxm keeps 4,096 buffers posted, so the benchmark's process grew from
//! 119 to 399 MiB (peak resident); with 512 posted (`FI_OFI_RXM_MSG_RX_SIZE=512`) only to 148 MiB, but then a
//! flood of unexpected messages from four senders (the `flood` test with `--reverse`) took up
//! every posted buffer and crawled for minutes instead of finishing in seconds. The eager
//! credit prices each message at the buffer size, whatever the user chooses
//! (`OfiNetmod::message_price`), so a larger buffer keeps a receiver within its credit.

use std::sync::Once;

use libfabric_sys::{fi_version, FI_MAJOR, FI_MINOR};

/// The rxm parameter that lets the core provider write into application buffers.
const RXM_DYN_RBUF: &str = "FI_OFI_RXM_ENABLE_DYN_RBUF";

/// The rxm parameter bounding segmentation and reassembly; at most the eager limit turns it
/// off.
const RXM_SAR_LIMIT: &str = "FI_OFI_RXM_SAR_LIMIT";

static APPLY: Once = Once::new();

/// Sets the workarounds this libfabric needs, once per process, before any other libfabric
/// call this crate makes (every path into libfabric starts with an `fi_getinfo`, which calls
/// this first).
pub(crate) fn apply() {
    APPLY.call_once(|| {
        if linked_version() >= (1, 18) {
            return;
        }
        // libfabric reads these with getenv during the first fi_getinfo, which every thread of
        // this crate reaches only after this Once has completed; Rust's own environment
        // accesses are serialised with set_var. (A C library in the same process reading the
        // environment at this very moment is the one case this cannot exclude, as for any
        // setenv during start-up.)
        if std::env::var_os(RXM_DYN_RBUF).is_none() {
            std::env::set_var(RXM_DYN_RBUF, "0");
        }
        if std::env::var_os(RXM_SAR_LIMIT).is_none() {
            // At most the eager limit (whatever buffer size the user chose): rxm then takes
            // the eager limit, turning SAR off.
            std::env::set_var(RXM_SAR_LIMIT, "0");
        }
    });
}

/// The parameter naming rxm's buffer size, which is its eager limit (`rxm_init.c`: the
/// historical name of the eager message size).
const RXM_BUFFER_SIZE: &str = "FI_OFI_RXM_BUFFER_SIZE";

/// rxm's buffer size when `FI_OFI_RXM_BUFFER_SIZE` is not set.
const RXM_DEFAULT_BUFFER_SIZE: usize = 16384;

/// The longest message `tcp;ofi_rxm` sends eagerly, whose receiver copies it out of a buffer
/// of its own: rxm's buffer size, `FI_OFI_RXM_BUFFER_SIZE` read as libfabric reads it
/// (`strtol` with base 0: decimal, `0x` hexadecimal, `0` octal), else 16 KiB. Longer messages
/// go by rxm's segmentation or rendezvous protocols. (With dynamic receive buffers, 1.18 and
/// later may send more eagerly than this; the buffer size is the bound that holds for every
/// version.) The provider's reported inject size says nothing of it: 64 bytes here.
pub fn rxm_eager_limit() -> usize {
    std::env::var(RXM_BUFFER_SIZE)
        .ok()
        .and_then(|v| parse_c_size(&v))
        .unwrap_or(RXM_DEFAULT_BUFFER_SIZE)
}

/// A size as C's `strtol(s, NULL, 0)` reads it, but `None` for what it would read as 0 or
/// negative, or for trailing junk.
fn parse_c_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    usize::from_str_radix(digits, radix).ok().filter(|&n| n > 0)
}

/// The version of the libfabric library linked at run time (major, minor).
pub fn linked_version() -> (u32, u32) {
    // SAFETY: fi_version takes no arguments, touches no state and only returns a number.
    let v = unsafe { fi_version() };
    (FI_MAJOR(v), FI_MINOR(v))
}

/// Whether `tcp;ofi_rxm` of this libfabric stops delivering on an endpoint after it has
/// truncated a message: only a version before 1.18 with dynamic receive buffers on, which
/// happens when the user turned them on explicitly (see the module docs).
pub fn rxm_truncation_breaks_endpoint() -> bool {
    linked_version() < (1, 18)
        && std::env::var(RXM_DYN_RBUF).map_or(true, |v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "false" | "no"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_library_runs_with_dynamic_receive_buffers_off() {
        apply();
        if linked_version() < (1, 18) {
            // Nothing in this test binary sets the variables, so apply() did.
            assert_eq!(std::env::var(RXM_DYN_RBUF).as_deref(), Ok("0"));
            assert_eq!(std::env::var(RXM_SAR_LIMIT).as_deref(), Ok("0"));
            assert_eq!(rxm_eager_limit(), 16384);
        }
        assert!(!rxm_truncation_breaks_endpoint());
    }

    #[test]
    fn sizes_read_as_libfabric_reads_them() {
        assert_eq!(parse_c_size("16384"), Some(16384));
        assert_eq!(parse_c_size(" 0x4000 "), Some(16384));
        assert_eq!(parse_c_size("040000"), Some(16384));
        assert_eq!(parse_c_size("0"), None);
        assert_eq!(parse_c_size("-5"), None);
        assert_eq!(parse_c_size("16k"), None);
        assert_eq!(parse_c_size(""), None);
    }
}
