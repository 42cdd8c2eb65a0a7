//! Business cards: the bytes every other rank publishes through PMI for this one to reach it
//! by. A rank of another job, a stray process speaking PMI or a corrupted key-value space can
//! publish anything; a rank must refuse a card it cannot use with an error naming that rank.

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};

use ch4_core::bootstrap::Bootstrap;
use netmod_any::Kind;
use netmod_tcp::TcpNetmod;

use crate::input::Input;

thread_local! {
    /// A TCP netmod of rank 0 in a job of four, bound once: learning cards only records
    /// addresses, so one serves every input.
    static TCP: RefCell<Option<TcpNetmod>> = RefCell::new(
        TcpNetmod::bind(0, 4, 1, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).ok()
    );
}

/// Every netmod's card reader on cards of the input's choosing. Input: a byte choosing the
/// reader, then length-prefixed cards (a length byte each).
///
/// - TCP (`netmod-tcp`'s bootstrap): a card is an address as text; anything else is an error.
/// - rails (`netmod-rails`): a count, then each rail's card after its length; a card that
///   splits gives back its bytes when joined again.
/// - the run-time choice (`netmod-any`): one byte naming the netmod, then its card; a card
///   naming another netmod than this rank's is refused.
///
/// (The OFI card is an address the provider parses: [`crate::cards`] cannot reach it without
/// an endpoint, so the `ofi_names` target does; the UCX card is a worker address UCX unpacks
/// itself, with no length to check it against — see `docs/hardening/fuzzing.md`.)
pub fn cards(data: &[u8]) {
    let mut input = Input::new(data);
    let which = input.u8();
    let mut cards: Vec<Vec<u8>> = Vec::new();
    while !input.is_empty() && cards.len() < 4 {
        cards.push(input.short_bytes().to_vec());
    }
    match which % 3 {
        0 => {
            while cards.len() < 4 {
                cards.push(b"127.0.0.1:9".to_vec());
            }
            TCP.with(|t| {
                if let Some(t) = t.borrow_mut().as_mut() {
                    let ok = t.learn_cards(&cards).is_ok();
                    let parse = |c: &Vec<u8>| {
                        std::str::from_utf8(c)
                            .ok()
                            .and_then(|s| s.parse::<SocketAddr>().ok())
                            .is_some()
                    };
                    // Rank 0's own card is never read.
                    assert_eq!(ok, cards[1..].iter().all(parse));
                }
            });
        }
        1 => {
            for card in &cards {
                if let Some(rails) = netmod_rails::split_card(card) {
                    let mut again = vec![rails.len() as u8];
                    for r in &rails {
                        again.extend((r.len() as u16).to_le_bytes());
                        again.extend(*r);
                    }
                    assert_eq!(&again, card);
                }
            }
        }
        _ => {
            for (rank, card) in cards.iter().enumerate() {
                for mine in [Kind::Tcp, Kind::Ofi, Kind::Ucx] {
                    if let Ok(inner) = netmod_any::inner_card(mine, rank as u32, card) {
                        assert_eq!(inner, &card[1..]);
                    }
                }
            }
        }
    }
}

thread_local! {
    /// An OFI endpoint per provider ([`ofi_names`]), opened on first use and again once its
    /// address vector has filled up or an insert left it numbered out of order.
    static OFI: RefCell<[Option<netmod_ofi::provider::Endpoint>; 2]> = const { RefCell::new([None, None]) };
}

/// The OFI netmod's card: a provider address, which a rank hands to libfabric's address vector
/// (`Endpoint::insert_addresses`) for every rank at once. The provider reads each address at
/// its own format's length, so a card shorter than that must be refused before libfabric
/// reads past it (AddressSanitizer watches the copy); `tcp;ofi_rxm` takes fixed-length
/// sockaddrs, `shm` NUL-terminated strings. Input: a byte choosing the provider (even: tcp,
/// odd: shm) and the number of cards (bits 1-2, plus one), then the cards, length-prefixed.
pub fn ofi_names(data: &[u8]) {
    let mut input = Input::new(data);
    let opts = input.u8();
    let which = usize::from(opts & 1);
    let count = usize::from((opts >> 1) & 3) + 1;
    let mut cards: Vec<Vec<u8>> = Vec::new();
    for _ in 0..count {
        cards.push(input.short_bytes().to_vec());
    }
    OFI.with(|slot| {
        let mut slot = slot.borrow_mut();
        let ep = &mut slot[which];
        if ep.as_ref().map_or(true, |e| e.av_len() > 4096) {
            *ep = None; // close the old one first
            let provider = ["tcp", "shm"][which];
            let Ok(info) =
                netmod_ofi::provider::select(&netmod_ofi::provider::Hints::for_provider(provider))
            else {
                return;
            };
            *ep = netmod_ofi::provider::Endpoint::open(info, 1 << 13).ok();
        }
        let Some(e) = ep.as_mut() else {
            return; // the provider is not on this machine
        };
        let Ok(own) = e.name() else {
            return;
        };
        let names = cards.concat();
        let before = e.av_len();
        match e.insert_addresses(&names, cards.len()) {
            Ok(addrs) => {
                assert_eq!(addrs.len(), count);
                // What was inserted were whole names of this provider's format.
                if !own.ends_with(&[0]) {
                    assert_eq!(names.len(), count * own.len());
                }
            }
            Err(_) => {
                if e.av_len() != before {
                    *ep = None;
                }
            }
        }
    });
}
