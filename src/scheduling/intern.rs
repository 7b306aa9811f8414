//! Interning of label keys, label values and resource names to dense integer ids, plus the
//! small hashing and bitset helpers the solver's hot paths use. Interning happens once while
//! the input is prepared; the solve itself compares integers and never hashes strings.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// An interned string (label key, label value or namespace).
pub type Sym = u32;

/// Synthetic hostnames of planned NodeClaims live above this id and have no string.
pub const SYNTHETIC_BASE: Sym = 1 << 31;

/// A fast, non-cryptographic hasher for integer keys (the Firefox/rustc "Fx" scheme).
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

/// String interner. Ids are dense from zero; each id remembers whether its text is an integer
/// so numeric requirements (Gt/Lt) never re-parse.
#[derive(Clone, Debug, Default)]
pub struct Interner {
    ids: FxHashMap<String, Sym>,
    names: Vec<String>,
    numbers: Vec<Option<i64>>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = Sym::try_from(self.names.len()).expect("fewer than 2^31 distinct strings");
        assert!(id < SYNTHETIC_BASE, "fewer than 2^31 distinct strings");
        self.ids.insert(s.to_string(), id);
        self.names.push(s.to_string());
        self.numbers.push(s.parse::<i64>().ok());
        id
    }

    pub fn get(&self, s: &str) -> Option<Sym> {
        self.ids.get(s).copied()
    }

    /// The text of an id; synthetic hostnames render as `hostname-placeholder-NNNN`.
    pub fn name(&self, id: Sym) -> std::borrow::Cow<'_, str> {
        if id >= SYNTHETIC_BASE {
            return format!("hostname-placeholder-{:04}", id - SYNTHETIC_BASE + 1).into();
        }
        self.names
            .get(id as usize)
            .map(|s| std::borrow::Cow::Borrowed(s.as_str()))
            .unwrap_or_default()
    }

    /// The integer value of an id's text, if it is one.
    #[inline]
    pub fn number(&self, id: Sym) -> Option<i64> {
        self.numbers.get(id as usize).copied().flatten()
    }
}

/// Fixed-length bitset over instance-type indices of one NodePool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bits(pub Box<[u64]>);

impl Bits {
    pub fn empty(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)].into_boxed_slice())
    }

    pub fn full(len: usize) -> Bits {
        let mut b = Bits::empty(len);
        for i in 0..len {
            b.set(i);
        }
        b
    }

    #[inline]
    pub fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    #[inline]
    pub fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }

    #[inline]
    pub fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn and_assign(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a &= *b;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Indices of set bits, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, &w)| {
            let mut word = w;
            std::iter::from_fn(move || {
                if word == 0 {
                    return None;
                }
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                Some(wi * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_is_stable_and_knows_numbers() {
        let mut i = Interner::default();
        let a = i.intern("zone-a");
        let n = i.intern("42");
        assert_eq!(i.intern("zone-a"), a);
        assert_ne!(a, n);
        assert_eq!(i.number(n), Some(42));
        assert_eq!(i.number(a), None);
        assert_eq!(i.name(a), "zone-a");
        assert_eq!(i.name(SYNTHETIC_BASE), "hostname-placeholder-0001");
    }

    #[test]
    fn bits_iterate_set_indices() {
        let mut b = Bits::empty(130);
        for i in [0, 63, 64, 129] {
            b.set(i);
        }
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(b.count(), 4);
        b.clear(63);
        assert!(!b.has(63));
        let mut full = Bits::full(130);
        full.and_assign(&b);
        assert_eq!(full, b);
    }
}
