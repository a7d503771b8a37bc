//! Canvas id → Kafka partition.
//!
//! The partition of a record is `toPositive(murmur2(key)) % partitions`, exactly what the Java
//! client's default partitioner does for keyed records (`org.apache.kafka.common.utils.Utils.murmur2`
//! with seed `0x9747b28c`, `toPositive(n) = n & 0x7fffffff`), and what librdkafka calls
//! `partitioner=murmur2_random` for non-empty keys. The publisher picks the partition with
//! [`partition_for`] and the gateway routes with it, so any other producer that uses the Java
//! default agrees with both.

/// Kafka's murmur2 of `key` as the Java client returns it (a signed 32-bit value).
pub fn kafka_murmur2(key: &[u8]) -> i32 {
    murmur2::murmur2(key, murmur2::KAFKA_SEED) as i32
}

/// The partition (0-based) of a record with `key` in a topic of `partitions` partitions.
///
/// # Panics
/// If `partitions` is 0 (a topic always has at least one partition; configs reject 0).
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    ((kafka_murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from Kafka's own `UtilsTest.testMurmur2` and librdkafka's `rdmurmur2.c` unit test.
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: &[(&str, i32)] = &[
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            ("abc", 479470107),
            ("kafka", -798503068),
            ("1", -1993445489),
            ("12345", -1188365604),
        ];
        for (key, want) in cases {
            assert_eq!(kafka_murmur2(key.as_bytes()), *want, "key {key:?}");
        }
    }

    #[test]
    fn partition_is_positive_hash_modulo_count() {
        // murmur2("21") = -973932308 → & 0x7fffffff = 1173551340 → % 6 = 0
        assert_eq!(partition_for(b"21", 6), 1173551340 % 6);
        for key in ["c1", "c2", "canvas-with-a-long-name", ""] {
            for n in 1..=12 {
                assert!(partition_for(key.as_bytes(), n) < n);
            }
        }
        assert_eq!(partition_for(b"anything", 1), 0);
    }
}
