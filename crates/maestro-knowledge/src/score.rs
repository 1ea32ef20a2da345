//! Scoring: reciprocal rank fusion of ranked lists, cosine similarity of embeddings, the
//! embeddings' storage form, and the content hash documents are keyed by.

use std::collections::HashMap;
use std::hash::Hash;

use sha2::{Digest, Sha256};

/// The `k` of reciprocal rank fusion: an item at rank `r` (from 1) in a list scores
/// `1 / (RRF_K + r)`; 60 is the value of the method's paper and of most search engines.
pub const RRF_K: f64 = 60.0;

/// Reciprocal rank fusion of `lists` (each best first): every item with the sum of
/// `1 / (RRF_K + rank)` over the lists it is in, best first; equal scores keep the order in
/// which the items first appear.
pub fn rrf<K: Clone + Eq + Hash>(lists: &[Vec<K>]) -> Vec<(K, f64)> {
    let mut scores: HashMap<K, (f64, usize)> = HashMap::new();
    let mut seen = 0;
    for list in lists {
        for (rank, item) in list.iter().enumerate() {
            let entry = scores.entry(item.clone()).or_insert_with(|| {
                seen += 1;
                (0.0, seen)
            });
            entry.0 += 1.0 / (RRF_K + (rank + 1) as f64);
        }
    }
    let mut fused: Vec<(K, f64, usize)> = scores
        .into_iter()
        .map(|(k, (score, first))| (k, score, first))
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    fused.into_iter().map(|(k, s, _)| (k, s)).collect()
}

/// The cosine similarity of `a` and `b`, in [-1, 1]; `None` when their lengths differ (two
/// models' embeddings) or either is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return None;
    }
    Some((dot / (na.sqrt() * nb.sqrt())) as f32)
}

/// An embedding as stored: each `f32` in little-endian order.
pub fn encode_embedding(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// An embedding read back from [`encode_embedding`]'s bytes; `None` when their length is not
/// a multiple of four.
pub fn decode_embedding(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// The SHA-256 of a document's bytes, lowercase hex: a document is stored once per collection
/// under it.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn rrf_rewards_items_ranked_well_in_several_lists() {
        let bm25 = vec!["a", "b", "c"];
        let vectors = vec!["c", "b", "d"];
        let fused = rrf(&[bm25, vectors]);
        let order: Vec<&str> = fused.iter().map(|(k, _)| *k).collect();
        // c (ranks 3 and 1) edges out b (2 and 2); both beat items in one list.
        assert_eq!(order, ["c", "b", "a", "d"]);
        let b = fused[1].1;
        assert!((b - 2.0 / 62.0).abs() < 1e-12, "{b}");
    }

    #[test]
    fn cosine_of_parallel_orthogonal_and_mismatched_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]).unwrap() - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).unwrap().abs() < 1e-6);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn embeddings_round_trip_as_little_endian_bytes() {
        let v = [1.5f32, -0.25, 3.0e-8];
        let bytes = encode_embedding(&v);
        assert_eq!(&bytes[..4], &1.5f32.to_le_bytes());
        assert_eq!(decode_embedding(&bytes).unwrap(), v);
        assert_eq!(decode_embedding(&bytes[..5]), None);
    }

    #[test]
    fn content_hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
