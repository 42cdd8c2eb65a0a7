//! `PMI_process_mapping`: which node each rank runs on.
//!
//! Hydra publishes this key in every job's key-value space so that a process can tell on-node
//! peers (reachable through shared memory) from remote ones without exchanging hostnames. The
//! value is `(vector,(S,N,P),(S,N,P),...)`: each block says "N nodes, numbered from S, each
//! running P consecutive ranks". If the blocks cover fewer ranks than the job has, they repeat;
//! on a repeat, MPICH's reader (`MPIR_NODEMAP_populate_ids_from_mapping`) skips leading blocks
//! that do not start at node 0, and [`node_ids`] does the same so both agree on every mapping.
//! An empty value means the process manager could not describe the layout; callers then fall
//! back to comparing hostnames.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};

/// The key under which process managers publish the mapping.
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";

/// One `(start, nodes, ranks_per_node)` block of a vector mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MapBlock {
    /// The first node id of the block.
    pub start_node: u32,
    /// How many consecutive nodes the block spans.
    pub nodes: u32,
    /// How many consecutive ranks run on each of those nodes.
    pub ranks_per_node: u32,
}

/// A parsed `PMI_process_mapping` value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProcessMapping {
    /// The empty value: the process manager does not know the layout.
    Unknown,
    /// A `(vector,...)` mapping.
    Vector(Vec<MapBlock>),
}

impl ProcessMapping {
    /// The mapping ch4run publishes: all `ranks` on node 0, `(vector,(0,1,ranks))`.
    pub fn single_node(ranks: u32) -> Self {
        ProcessMapping::Vector(vec![MapBlock {
            start_node: 0,
            nodes: 1,
            ranks_per_node: ranks,
        }])
    }

    /// Parses a mapping value. Whitespace between tokens is allowed, as MPICH allows it.
    pub fn parse(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Ok(ProcessMapping::Unknown);
        }
        let mut p = Parser { s: text, pos: 0 };
        p.expect('(')?;
        p.skip_space();
        if !p.rest().starts_with("vector") {
            return Err(p.error("only the 'vector' mapping type is defined"));
        }
        p.pos += "vector".len();
        if p.rest()
            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(p.error("only the 'vector' mapping type is defined"));
        }
        let mut blocks = Vec::new();
        loop {
            p.skip_space();
            if p.eat(')') {
                break;
            }
            p.expect(',')?;
            p.expect('(')?;
            let start_node = p.number()?;
            p.expect(',')?;
            let nodes = p.number()?;
            p.expect(',')?;
            let ranks_per_node = p.number()?;
            p.expect(')')?;
            blocks.push(MapBlock {
                start_node,
                nodes,
                ranks_per_node,
            });
        }
        p.skip_space();
        if !p.rest().is_empty() {
            return Err(p.error("trailing characters after the mapping"));
        }
        if blocks.is_empty() {
            return Err(p.error("a vector mapping needs at least one block"));
        }
        Ok(ProcessMapping::Vector(blocks))
    }

    /// The node id of every rank of a job of `size` ranks, or `None` for [`Unknown`].
    ///
    /// Fails if the blocks place no rank at all (every block has zero nodes or zero ranks),
    /// or if a node id would overflow.
    ///
    /// [`Unknown`]: ProcessMapping::Unknown
    pub fn node_ids(&self, size: u32) -> Result<Option<Vec<u32>>> {
        let blocks = match self {
            ProcessMapping::Unknown => return Ok(None),
            ProcessMapping::Vector(blocks) => blocks,
        };
        let size = usize::try_from(size)
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "job size does not fit memory"))?;
        let mut ids = Vec::new();
        ids.try_reserve_exact(size).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot allocate a node map for {size} ranks"),
            )
        })?;
        let mut wrapped = false;
        while ids.len() < size {
            let before = ids.len();
            // After the first pass, MPICH restarts at the first block that starts at node 0.
            let first = if wrapped {
                blocks
                    .iter()
                    .position(|b| b.start_node == 0)
                    .unwrap_or(blocks.len())
            } else {
                0
            };
            for block in &blocks[first..] {
                if block.start_node == 0 {
                    wrapped = true;
                }
                if block.ranks_per_node == 0 {
                    // Places no rank however many nodes it spans: walking them one by one took
                    // minutes for (0,4294967295,0).
                    continue;
                }
                for node in 0..block.nodes {
                    let id = block.start_node.checked_add(node).ok_or_else(|| {
                        Error::new(ErrorKind::Wire, "node id in process mapping overflows")
                    })?;
                    for _ in 0..block.ranks_per_node {
                        if ids.len() == size {
                            return Ok(Some(ids));
                        }
                        ids.push(id);
                    }
                }
            }
            if ids.len() == before {
                return Err(Error::new(
                    ErrorKind::Wire,
                    "process mapping places no ranks (every block is empty)",
                ));
            }
        }
        Ok(Some(ids))
    }
}

impl fmt::Display for ProcessMapping {
    /// Formats as Hydra does: `(vector,(0,1,4))`, no spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessMapping::Unknown => Ok(()),
            ProcessMapping::Vector(blocks) => {
                f.write_str("(vector")?;
                for b in blocks {
                    write!(f, ",({},{},{})", b.start_node, b.nodes, b.ranks_per_node)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Parses `mapping` and returns the node id of each of `size` ranks (`None` if the mapping is
/// the empty "unknown" value). A convenience over [`ProcessMapping`].
pub fn node_ids(mapping: &str, size: u32) -> Result<Option<Vec<u32>>> {
    ProcessMapping::parse(mapping)?.node_ids(size)
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        self.skip_space();
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("expected '{c}'")))
        }
    }

    fn number(&mut self) -> Result<u32> {
        self.skip_space();
        let rest = self.rest();
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(self.error("expected a number"));
        }
        let n = rest[..digits]
            .parse::<u32>()
            .map_err(|_| self.error("number out of range"))?;
        self.pos += digits;
        Ok(n)
    }

    fn error(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::Wire,
            format!(
                "invalid PMI_process_mapping at byte {}: {what} (value {:?})",
                self.pos,
                truncate(self.s, 80)
            ),
        )
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(m: &str, size: u32) -> Vec<u32> {
        node_ids(m, size).unwrap().unwrap()
    }

    /// A block of four billion nodes with no ranks on them is skipped at once, not walked node
    /// by node (6.5 minutes in the pmi_values fuzz target).
    #[test]
    fn a_block_without_ranks_is_not_walked() {
        let start = std::time::Instant::now();
        assert!(node_ids("(vector,(0,4294967295,0))", 1).is_err());
        assert_eq!(ids("(vector,(0,4294967295,0),(0,1,2))", 3), vec![0, 0, 0]);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn single_node() {
        assert_eq!(ids("(vector,(0,1,4))", 4), vec![0, 0, 0, 0]);
        assert_eq!(
            ProcessMapping::single_node(4).to_string(),
            "(vector,(0,1,4))"
        );
    }

    #[test]
    fn hydra_one_per_node_repeats_on_one_host() {
        // What Hydra 4.0.2 publishes for `-n 2` on a host with one default slot.
        assert_eq!(ids("(vector,(0,1,1))", 3), vec![0, 0, 0]);
    }

    #[test]
    fn block_and_cyclic_layouts() {
        assert_eq!(ids("(vector,(0,2,2))", 4), vec![0, 0, 1, 1]);
        assert_eq!(ids("(vector,(0,4,1))", 8), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(
            ids("(vector, (0,2,2), (2,1,1))", 7),
            vec![0, 0, 1, 1, 2, 0, 0]
        );
        assert_eq!(ids(" ( vector , ( 1 , 1 , 1 ) , ( 0 , 2 , 2 ) ) ", 7), {
            // First pass: node 1, then 0,0,1,1. Repeats start at the node-0 block.
            vec![1, 0, 0, 1, 1, 0, 0]
        });
    }

    #[test]
    fn unknown_mapping() {
        assert_eq!(node_ids("", 4).unwrap(), None);
        assert_eq!(ProcessMapping::Unknown.to_string(), "");
    }

    #[test]
    fn rejects_malformed_mappings() {
        for bad in [
            "XXX, (1,1))",
            "vector, (1,1))",
            "(vector, (1.11, 2,2))",
            "(vector, (1,1,1), (0,2,2),)",
            "(vectorx,(0,1,1))",
            "(vector)",
            "(vector,(0,1,1)) junk",
            "(vector,(0,1,99999999999))",
            "(vector,(0,1,-1))",
        ] {
            let err = node_ids(bad, 4).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Wire, "{bad:?}");
        }
    }

    #[test]
    fn rejects_mappings_that_place_nobody() {
        assert!(node_ids("(vector,(0,0,4))", 4).is_err());
        assert!(node_ids("(vector,(0,3,0))", 4).is_err());
        assert_eq!(ids("(vector,(0,3,0))", 0), Vec::<u32>::new());
    }

    #[test]
    fn rejects_node_id_overflow() {
        assert!(node_ids("(vector,(4294967295,2,1))", 2).is_err());
    }

    proptest! {
        #[test]
        fn never_panics(s in "[(),vector0-9 ]{0,40}", size in 0u32..64) {
            let _ = node_ids(&s, size);
        }

        #[test]
        fn format_then_parse(blocks in proptest::collection::vec((0u32..100, 0u32..5, 0u32..5), 1..5)) {
            let m = ProcessMapping::Vector(blocks.into_iter().map(|(s, n, p)| MapBlock {
                start_node: s, nodes: n, ranks_per_node: p }).collect());
            prop_assert_eq!(ProcessMapping::parse(&m.to_string()).unwrap(), m);
        }
    }
}
