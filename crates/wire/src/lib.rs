//! hx-wire
