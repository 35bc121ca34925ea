//! doris-lite: a single-process emulator of the Apache Doris surfaces that clients use.
