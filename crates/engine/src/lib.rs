//! hx-engine
