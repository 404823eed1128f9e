//! RELR: the compact encoding of relative relocations (DT_RELR). Used to
//! say exactly how many bytes a binary's relative relocations would take if
//! it were linked with `-z pack-relative-relocs`.
//!
//! The encoding is a sequence of words. An even word is an address that is
//! relocated; the next word-aligned addresses after it are described by odd
//! words, each a bitmap (bit 0 is the marker) of the following 63 (64-bit)
//! or 31 (32-bit) words. Linkers emit the canonical greedy encoding below,
//! so the count it gives is the size the linker will produce.

/// Number of words the canonical RELR encoding of `offsets` takes.
///
/// `offsets` must be sorted, deduplicated and aligned to `word_size`
/// (4 or 8); callers filter out what RELR cannot express.
pub fn encoded_words(offsets: &[u64], word_size: u64) -> u64 {
    debug_assert!(word_size == 4 || word_size == 8);
    let bits_per_bitmap = word_size * 8 - 1;
    let bitmap_span = bits_per_bitmap * word_size;
    let mut words = 0u64;
    let mut i = 0usize;
    while i < offsets.len() {
        // An address entry relocates offsets[i] and starts a run of bitmaps.
        words += 1;
        let mut base = offsets[i].wrapping_add(word_size);
        i += 1;
        loop {
            let mut covered = false;
            while i < offsets.len() {
                let delta = offsets[i].wrapping_sub(base);
                if offsets[i] < base || delta >= bitmap_span {
                    break;
                }
                covered = true;
                i += 1;
            }
            if !covered {
                break;
            }
            words += 1;
            base = base.wrapping_add(bitmap_span);
        }
    }
    words
}

/// The canonical RELR encoding of `offsets` (the greedy one linkers emit,
/// so `encode(o, w).len() == encoded_words(o, w)`), for `coldstart pack`.
///
/// `offsets` must be sorted, deduplicated and aligned to `word_size`.
pub fn encode(offsets: &[u64], word_size: u64) -> Vec<u64> {
    debug_assert!(word_size == 4 || word_size == 8);
    let bits_per_bitmap = word_size * 8 - 1;
    let bitmap_span = bits_per_bitmap * word_size;
    let mut words = Vec::new();
    let mut i = 0usize;
    while i < offsets.len() {
        words.push(offsets[i]);
        let mut base = offsets[i].wrapping_add(word_size);
        i += 1;
        loop {
            let mut bitmap = 0u64;
            while i < offsets.len() {
                let delta = offsets[i].wrapping_sub(base);
                if offsets[i] < base || delta >= bitmap_span {
                    break;
                }
                bitmap |= 1 << (delta / word_size);
                i += 1;
            }
            if bitmap == 0 {
                break;
            }
            words.push(bitmap << 1 | 1);
            base = base.wrapping_add(bitmap_span);
        }
    }
    words
}

/// Decodes RELR words into the addresses they relocate (for tests and
/// tools that hold raw words; inspection uses object's iterator).
pub fn decode(words: &[u64], word_size: u64) -> Vec<u64> {
    let bits_per_bitmap = word_size * 8 - 1;
    let mut out = Vec::new();
    let mut base = 0u64;
    for &word in words {
        if word & 1 == 0 {
            out.push(word);
            base = word.wrapping_add(word_size);
        } else {
            for bit in 0..bits_per_bitmap {
                if (word >> (bit + 1)) & 1 == 1 {
                    out.push(base.wrapping_add(bit * word_size));
                }
            }
            base = base.wrapping_add(bits_per_bitmap * word_size);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_set_needs_no_words() {
        assert_eq!(encoded_words(&[], 8), 0);
    }

    #[test]
    fn lone_address_is_one_word() {
        assert_eq!(encoded_words(&[0x1000], 8), 1);
    }

    #[test]
    fn contiguous_run_uses_one_bitmap_per_63_words() {
        // 1 address + 63 following words fit in one address + one bitmap.
        let run: Vec<u64> = (0..64).map(|i| 0x1000 + i * 8).collect();
        assert_eq!(encoded_words(&run, 8), 2);
        // One more word needs a second bitmap.
        let run: Vec<u64> = (0..65).map(|i| 0x1000 + i * 8).collect();
        assert_eq!(encoded_words(&run, 8), 3);
    }

    #[test]
    fn distant_addresses_restart_with_an_address_word() {
        // Gap of a bitmap span or more cannot be bridged by an empty bitmap.
        let offsets = [0x1000, 0x1008, 0x1000 + 8 + 63 * 8 + 8, 0x90000];
        // 0x1000: address; 0x1008: bitmap 1; 0x1210 lies past bitmap 1's
        // 63 words but inside bitmap 2's; 0x90000: a new address.
        assert_eq!(encoded_words(&offsets, 8), 4);
    }

    #[test]
    fn thirty_two_bit_bitmaps_cover_31_words() {
        let run: Vec<u64> = (0..32).map(|i| 0x1000 + i * 4).collect();
        assert_eq!(encoded_words(&run, 4), 2);
        let run: Vec<u64> = (0..33).map(|i| 0x1000 + i * 4).collect();
        assert_eq!(encoded_words(&run, 4), 3);
    }

    #[test]
    fn encode_round_trips_and_matches_the_size() {
        let mut offsets: Vec<u64> = (0..200).map(|i| 0x4000 + i * 8).collect();
        offsets.extend([0x5000 + 8 * 70, 0x9_0000, 0x9_0010, 0x9_0000 + 8 * 62]);
        offsets.extend((0..5).map(|i| 0x10_0000 + i * 8 * 64));
        offsets.sort_unstable();
        let words = encode(&offsets, 8);
        assert_eq!(words.len() as u64, encoded_words(&offsets, 8));
        assert_eq!(decode(&words, 8), offsets);
        let thirty_two: Vec<u64> = (0..100).map(|i| 0x1000 + i * 4).chain([0x8000]).collect();
        let words = encode(&thirty_two, 4);
        assert_eq!(words.len() as u64, encoded_words(&thirty_two, 4));
        assert_eq!(decode(&words, 4), thirty_two);
    }

    #[test]
    fn encode_writes_the_bitmap_linkers_write() {
        // 0x2000, 0x2008 and 0x2018: an address, then bits 0 and 2.
        assert_eq!(
            encode(&[0x2000, 0x2008, 0x2018], 8),
            vec![0x2000, 0b101 << 1 | 1]
        );
    }

    #[test]
    fn decode_inverts_a_hand_encoded_table() {
        // Address 0x2000, then a bitmap with bits for words 0 and 2 after it.
        let words = [0x2000, 0b101 << 1 | 1];
        assert_eq!(decode(&words, 8), vec![0x2000, 0x2008, 0x2018]);
    }
}
