//! hx-protocol
