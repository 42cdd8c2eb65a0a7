//! How a netmod joins a job: opened on its own, its business card published, the peers' cards
//! learned — the same three steps for every netmod, so process mode (cards through the process
//! manager's key-value space) and ranks as threads (cards through memory) need no code per
//! netmod. The names follow MPICH, whose netmods publish a "business card" through PMI.
//!
//! A card can be longer than one PMI value (a libfabric address of several providers, a UCX
//! worker address of hundreds of bytes): [`card_segments`] cuts it into values that fit, and
//! [`join_card_segments`] puts it back together.

use crate::transport::Netmod;
use crate::types::Gpid;
use crate::{Error, ErrorKind, PeerState, Result};

/// Tells whether a process is still in the job, as someone other than the netmod knows it:
/// the job's record when ranks are threads, the launcher when they are processes. Called from
/// progress when a wait has found nothing to do, so it must be cheap.
pub type PeerWatch = std::sync::Arc<dyn Fn(Gpid) -> PeerState + Send + Sync>;

/// A netmod that can join a job of processes (or of threads).
pub trait Bootstrap: Netmod {
    /// Whether this netmod reaches other nodes at all (false only for `NoNetmod`: a job must
    /// then fit on one node).
    const NETWORK: bool = true;

    /// Opens rank `rank`'s endpoint in a job of `size`. `job_key` is 64 random bits drawn by
    /// rank 0, the same in every rank, that a netmod may use to refuse strangers. When
    /// `spans_nodes` is false no peer is reached through the netmod and no card will be
    /// exchanged: a netmod then opens the least it can (or nothing).
    fn open(rank: Gpid, size: u32, job_key: u64, spans_nodes: bool) -> Result<Self>;

    /// What a peer needs to reach this rank (an address), as bytes.
    fn business_card(&self) -> Result<Vec<u8>>;

    /// Learns every rank's card, in rank order, this rank's own included.
    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()>;

    /// Learns the cards of a job of `size` ranks from `source`, which gives rank `g`'s card
    /// when asked (reading it from the process manager). A netmod that needs a peer's card
    /// only to reach it (a connectionless one, whose address handles are made on first
    /// contact) keeps the source and asks on first contact, so a rank holds no card of a peer
    /// it never talks to: in a job of a million processes, the difference between a few
    /// hundred megabytes of addresses and none. The default asks for every card now and
    /// calls [`Bootstrap::learn_cards`].
    fn learn_cards_from(&mut self, size: u32, mut source: CardSource) -> Result<()> {
        let cards = (0..size).map(&mut source).collect::<Result<Vec<_>>>()?;
        self.learn_cards(&cards)
    }

    /// Makes `watch` this netmod's source of which peers left or failed, for the peers it
    /// cannot judge itself (a libfabric provider retries a dead peer's address for ever; a TCP
    /// netmod knows only the peers it is connected to). The default ignores it: a netmod that
    /// sees every peer's end itself needs no watch.
    fn watch_peers(&mut self, watch: PeerWatch) {
        let _ = watch;
    }
}

/// Rank `g`'s business card, on demand: see [`Bootstrap::learn_cards_from`]. Called at start-up
/// or on first contact with a peer, never per message, so a boxed closure costs nothing that
/// shows; `Send` because a netmod may move to another thread with its rank.
pub type CardSource = Box<dyn FnMut(Gpid) -> Result<Vec<u8>> + Send>;

/// Cuts `card` into text values of at most `max_value` characters each (hex, two characters a
/// byte): as many as needed, at least one.
pub fn card_segments(card: &[u8], max_value: usize) -> Result<Vec<String>> {
    let per = max_value / 2;
    if per == 0 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("values of {max_value} characters cannot carry a business card"),
        ));
    }
    if card.is_empty() {
        return Ok(vec![String::new()]);
    }
    Ok(card
        .chunks(per)
        .map(|c| c.iter().map(|b| format!("{b:02x}")).collect())
        .collect())
}

/// Puts a card cut by [`card_segments`] back together; `rank` names it in errors.
pub fn join_card_segments(rank: Gpid, segments: &[String]) -> Result<Vec<u8>> {
    let mut card = Vec::new();
    for s in segments {
        if s.len() % 2 != 0 {
            return Err(bad_card(rank, "an odd number of hex digits"));
        }
        for pair in s.as_bytes().chunks(2) {
            let hex = std::str::from_utf8(pair).map_err(|_| bad_card(rank, "not text"))?;
            let b = u8::from_str_radix(hex, 16).map_err(|_| bad_card(rank, "not hex"))?;
            card.push(b);
        }
    }
    Ok(card)
}

fn bad_card(rank: Gpid, why: &str) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("rank {rank} published a malformed business card: {why}"),
    )
}

impl Bootstrap for crate::transport::NoNetmod {
    const NETWORK: bool = false;

    fn open(_: Gpid, _: u32, _: u64, _: bool) -> Result<Self> {
        Ok(crate::transport::NoNetmod)
    }

    fn business_card(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    fn learn_cards(&mut self, _: &[Vec<u8>]) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_longer_than_a_value_survives_segmentation() {
        let card: Vec<u8> = (0..=255u8).cycle().take(1500).collect();
        let segs = card_segments(&card, 1024).unwrap();
        assert_eq!(segs.len(), 3, "512 bytes a segment");
        assert!(segs.iter().all(|s| s.len() <= 1024));
        assert_eq!(join_card_segments(0, &segs).unwrap(), card);
        assert_eq!(card_segments(&[], 1024).unwrap(), vec![String::new()]);
        assert_eq!(
            join_card_segments(0, &[String::new()]).unwrap(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn malformed_cards_are_errors() {
        for bad in ["abc", "zz", "0g"] {
            let e = join_card_segments(3, &[bad.to_string()]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Transport, "{bad}");
            assert!(e.to_string().contains("rank 3"), "{e}");
        }
        assert!(card_segments(&[1], 1).is_err());
    }
}
