//! Per-process state that exists only for the processes a rank has reached.
//!
//! A rank of a job of a million processes talks to a few of them; a `Vec` with an entry for
//! each would cost its bytes a million times (the endpoint alone, eight). [`Paged`] keeps
//! entries in pages of [`PAGE`], each made when one of its entries is first written: a rank
//! pays for the pages of the processes it reaches, and a few bytes of page table for the rest.
//! Reading an entry is two loads.

/// Entries per page: 256 endpoints are 2 KiB.
pub(crate) const PAGE: usize = 256;

/// A table of `T` for processes `0..len`, every entry `T::default()` until written.
pub(crate) struct Paged<T> {
    pages: Vec<Option<Box<[T; PAGE]>>>,
    len: usize,
}

impl<T: Copy + Default> Paged<T> {
    /// A table for processes `0..len`, with no page yet.
    pub(crate) fn new(len: u32) -> Paged<T> {
        Paged {
            pages: Vec::new(),
            len: len as usize,
        }
    }

    /// The entry of process `i`: the default where none was written (or `i` is out of range).
    #[inline(always)]
    pub(crate) fn get(&self, i: u32) -> T {
        let i = i as usize;
        match self.pages.get(i / PAGE) {
            Some(Some(page)) => page[i % PAGE],
            _ => T::default(),
        }
    }

    /// The entry of process `i`, to change, making its page if needed; `None` when `i` is not
    /// a process of the table (a peer's malformed message names no page to make).
    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let i = i as usize;
        if i >= self.len {
            return None;
        }
        let p = i / PAGE;
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| Box::new([T::default(); PAGE]));
        Some(&mut page[i % PAGE])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_default_until_written_and_pages_come_with_writes() {
        let mut t: Paged<u32> = Paged::new(1_000_000);
        assert_eq!(t.get(999_999), 0);
        assert!(t.pages.is_empty(), "reading makes no page");
        *t.get_mut(999_999).unwrap() = 7;
        *t.get_mut(3).unwrap() = 5;
        assert_eq!(t.get(999_999), 7);
        assert_eq!(t.get(3), 5);
        assert_eq!(t.get(4), 0);
        assert_eq!(t.pages.iter().filter(|p| p.is_some()).count(), 2);
    }

    #[test]
    fn a_process_outside_the_table_has_no_entry_to_write() {
        let mut t: Paged<u32> = Paged::new(10);
        assert!(t.get_mut(10).is_none());
        assert!(t.get_mut(u32::MAX).is_none());
        assert!(t.pages.is_empty());
        assert_eq!(t.get(u32::MAX), 0);
    }
}
