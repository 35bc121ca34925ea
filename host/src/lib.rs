//! Sluice.
