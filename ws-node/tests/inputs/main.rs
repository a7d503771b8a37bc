//! The parsers of outside input, as one test binary: every checked-in fuzz corpus run through its
//! target's check (`fuzz_corpus`), and the `proptest` properties (`properties`).

mod fuzz_corpus;
mod properties;
