//! Unit tests of adopt: classification and the byte-preserving edits.
