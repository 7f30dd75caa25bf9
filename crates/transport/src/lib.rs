//! hx-transport
