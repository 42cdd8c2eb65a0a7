//! Joining a job over several rails: every rail opened on its interface, one business card
//! that carries each rail's own, and each peer reached by the rails both sides have.

use std::net::IpAddr;

use ch4_core::bootstrap::{Bootstrap, PeerWatch};
use ch4_core::{env, Error, ErrorKind, Gpid, Result};

use crate::spec::{self, RAILS_VAR};
use crate::{Rail, Rails};

impl<T: Rail> Rails<T> {
    /// Opens one rail per entry of `specs`, found among this host's interfaces, with `open`.
    pub fn open_rails(
        specs: &[spec::RailSpec],
        mut open: impl FnMut(IpAddr) -> Result<T>,
    ) -> Result<Rails<T>> {
        let found = spec::resolve(specs, &spec::host_addrs()?, spec::link_speed)?;
        let mut rails = Vec::with_capacity(found.len());
        for rail in found {
            let t = open(rail.addr).map_err(|e| {
                e.context(format!("{RAILS_VAR}: rail {} ({})", rail.name, rail.addr))
            })?;
            rails.push((t, format!("{} {}", rail.name, rail.addr), rail.weight));
        }
        Rails::new(rails)
    }

    /// The rails `CH4_RAILS` lists, or `None` when it is not set.
    pub fn requested() -> Result<Option<Vec<spec::RailSpec>>> {
        env::raw(RAILS_VAR)?.map(|v| spec::parse(&v)).transpose()
    }
}

impl<T: Rail> Bootstrap for Rails<T> {
    const NETWORK: bool = T::NETWORK;

    /// One rail per `CH4_RAILS` entry; without it, or in a job on one node (which reaches no
    /// peer through the network), the netmod's own endpoint alone.
    fn open(rank: Gpid, size: u32, job_key: u64, spans_nodes: bool) -> Result<Self> {
        match Self::requested()? {
            Some(specs) if spans_nodes => {
                Self::open_rails(&specs, |addr| T::open_on(rank, size, job_key, addr))
            }
            _ => T::open(rank, size, job_key, spans_nodes).map(Rails::single),
        }
    }

    /// The number of rails, then each rail's card after its length (two bytes, little-endian).
    fn business_card(&self) -> Result<Vec<u8>> {
        let mut card = vec![self.count() as u8];
        for i in 0..self.count() {
            let c = self.rail(i).business_card()?;
            let len = u16::try_from(c.len()).map_err(|_| {
                Error::new(ErrorKind::Internal, "a rail's business card is over 64 KiB")
            })?;
            card.extend_from_slice(&len.to_le_bytes());
            card.extend_from_slice(&c);
        }
        Ok(card)
    }

    /// Rail *i* learns every peer's rail *i*; a peer without one is given its primary's card,
    /// which is never used: nothing goes to it on a rail it lacks.
    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()> {
        let mut split = Vec::with_capacity(cards.len());
        for (rank, card) in cards.iter().enumerate() {
            split.push(split_card(card).ok_or_else(|| {
                Error::new(
                    ErrorKind::Transport,
                    format!(
                        "rank {rank} published a malformed rails card ({} bytes)",
                        card.len()
                    ),
                )
            })?);
        }
        self.reach = split
            .iter()
            .map(|rails| rails.len().min(self.count()) as u8)
            .collect();
        for i in 0..self.count() {
            let of_rail: Vec<Vec<u8>> = split
                .iter()
                .map(|rails| rails.get(i).unwrap_or(&rails[0]).to_vec())
                .collect();
            self.rail_mut(i).learn_cards(&of_rail)?;
        }
        Ok(())
    }

    fn watch_peers(&mut self, watch: PeerWatch) {
        for r in self.each_mut() {
            r.watch_peers(watch.clone());
        }
    }
}

/// A rails card's per-rail cards; `None` when malformed (no rail, a length past the end, bytes
/// left over). Public for the fuzz targets (`fuzz/`): the card is another rank's bytes.
#[doc(hidden)]
pub fn split_card(card: &[u8]) -> Option<Vec<&[u8]>> {
    let (&n, mut rest) = card.split_first()?;
    if n == 0 {
        return None;
    }
    let mut rails = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = u16::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return None;
        }
        rails.push(&tail[..len]);
        rest = &tail[len..];
    }
    rest.is_empty().then_some(rails)
}

#[cfg(test)]
mod tests {
    use super::split_card;

    #[test]
    fn cards_split_into_their_rails_and_malformed_ones_are_refused() {
        let card = [2, 3, 0, b'a', b'b', b'c', 1, 0, b'x'];
        assert_eq!(split_card(&card).unwrap(), vec![&b"abc"[..], &b"x"[..]]);
        for bad in [
            &[][..],
            &[0],
            &[1, 5, 0, b'a'],
            &[1, 1, 0, b'a', b'b'],
            &[2, 1, 0, b'a'],
        ] {
            assert!(split_card(bad).is_none(), "{bad:?}");
        }
    }
}
