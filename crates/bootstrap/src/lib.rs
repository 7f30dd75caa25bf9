//! hx-bootstrap
