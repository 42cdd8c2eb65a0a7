//! What the natively matching netmods read from a peer besides the user's data: the OFI
//! large-message descriptor and both netmods' credit messages. (The AM fallback's credit
//! packet, and the core's accounting of returned credit behind all three, are fed by the
//! `am_packets` target.)

use crate::input::Input;

/// The OFI large-message stub payload and descriptor (`netmod-ofi/src/large.rs`): a stub parses
/// only from its exact size, never with an acknowledgement name of 0 or one carrying the flag
/// bits, and what parses is what a sender would have written. Input: the bytes.
pub fn ofi_large(data: &[u8]) {
    use netmod_ofi::fuzzing::{descriptor, inline_stub, inline_stub_bytes};
    use netmod_ofi::tag::{INLINE, LARGE};
    if let Some((ack, len, addr, key)) = inline_stub(data) {
        assert_ne!(ack, 0);
        assert_eq!(ack & (LARGE | INLINE), 0);
        assert_eq!(inline_stub_bytes(ack, len, addr, key), data);
    }
    if let Some((len, addr, key)) = descriptor(data) {
        assert_eq!(data.len(), 24);
        let again: Vec<u8> = [len, addr, key]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(again, data);
    }
}

/// Credit messages as they arrive: OFI's remote CQ data (giver and number of messages, with
/// the flag bits that mark other messages) and UCX's tag and 4-byte payload. Decoding never
/// panics, a giver comes back as it was encoded, and UCX takes only a payload of exactly four
/// bytes. Input: the CQ data or tag (8 bytes), then UCX's payload.
pub fn credit(data: &[u8]) {
    let mut input = Input::new(data);
    let word = input.u64();
    let payload = input.rest();
    {
        use netmod_ofi::tag;
        let (giver, count) = tag::from_cq_data(word);
        let _ = (
            tag::is_uncredited(word),
            tag::is_large(word),
            tag::is_inline(word),
        );
        let _ = (tag::ack_name(word), tag::inline_len(word));
        assert_eq!(
            tag::from_cq_data(tag::cq_data(giver, count)),
            (giver, count)
        );
    }
    {
        use netmod_ucx::tag;
        let (giver, count) = tag::credit_message(word, Some(payload));
        assert_eq!(count.is_some(), payload.len() == 4);
        assert!(giver < 1 << 20);
        assert_eq!(tag::from_credit_tag(tag::credit_tag(giver)), giver);
        assert_eq!(tag::credit_message(word, None).1, None);
    }
}
