//! A fragment's slots in pages of [`PAGE_SLOTS`] (NDB's TUP keeps rows in fixed-size pages of
//! DataMemory for the same reason): a slot's id is its page and its place in the page, and a
//! fragment grows by one page at a time.
//!
//! One vector of every slot doubled when it filled: the insert that filled it copied every slot
//! (128 bytes each) into memory touched for the first time, while every other request waited
//! (with the hash index's growth, the longest batch of 1000 inserts loading 1 000 000 rows took
//! 139-203 ms; `cargo bench -p rndb-ndbd --bench key_path`). A new page is allocated and never
//! moved, so a slot's address is stable too.

/// Slots in one page: 128 KiB of 128-byte slots.
pub const PAGE_SLOTS: usize = 1024;

/// Slots by id, in pages. Ids are dense: every id below [`Pages::len`] has a place (holding
/// `None` when free).
#[derive(Debug)]
pub struct Pages<T> {
    /// Every page but the last is full; each was allocated with room for exactly
    /// [`PAGE_SLOTS`], so pushing never moves one.
    pages: Vec<Vec<Option<T>>>,
}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Pages { pages: Vec::new() }
    }
}

impl<T> Pages<T> {
    /// One past the highest id.
    pub fn len(&self) -> usize {
        match self.pages.last() {
            Some(last) => (self.pages.len() - 1) * PAGE_SLOTS + last.len(),
            None => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub fn get(&self, id: usize) -> Option<&Option<T>> {
        self.pages.get(id / PAGE_SLOTS)?.get(id % PAGE_SLOTS)
    }

    pub fn get_mut(&mut self, id: usize) -> Option<&mut Option<T>> {
        self.pages
            .get_mut(id / PAGE_SLOTS)?
            .get_mut(id % PAGE_SLOTS)
    }

    /// Adds a place at the end; returns its id.
    pub fn push(&mut self, value: Option<T>) -> usize {
        let id = self.len();
        match self.pages.last_mut() {
            Some(page) if page.len() < PAGE_SLOTS => page.push(value),
            _ => {
                let mut page = Vec::with_capacity(PAGE_SLOTS);
                page.push(value);
                self.pages.push(page);
            }
        }
        id
    }

    /// Every place in id order, emptying the pages.
    pub fn drain(&mut self) -> impl Iterator<Item = Option<T>> {
        std::mem::take(&mut self.pages).into_iter().flatten()
    }

    /// Every place in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Option<T>> {
        self.pages.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids are dense across page boundaries, every place reads back what was put there, and
    /// iteration and drain go in id order.
    #[test]
    fn ids_run_across_pages_in_order() {
        let mut pages = Pages::default();
        assert!(pages.is_empty());
        assert!(pages.get(0).is_none());
        let count = 2 * PAGE_SLOTS + 3;
        for i in 0..count {
            let value = (i % 7 != 0).then_some(i);
            assert_eq!(pages.push(value), i);
        }
        assert_eq!(pages.len(), count);
        assert!(pages.get(count).is_none());
        for i in [0, 1, PAGE_SLOTS - 1, PAGE_SLOTS, PAGE_SLOTS + 1, count - 1] {
            assert_eq!(pages.get(i), Some(&(i % 7 != 0).then_some(i)), "id {i}");
        }
        *pages.get_mut(PAGE_SLOTS).expect("place") = Some(99);
        assert_eq!(pages.get(PAGE_SLOTS), Some(&Some(99)));
        let listed: Vec<Option<usize>> = pages.iter().copied().collect();
        assert_eq!(listed.len(), count);
        assert_eq!(listed[PAGE_SLOTS], Some(99));
        let drained: Vec<Option<usize>> = pages.drain().collect();
        assert_eq!(drained, listed);
        assert!(pages.is_empty());
        assert_eq!(pages.push(Some(5)), 0);
    }
}
