//! Parts of the certificate-rotation-under-load suite (`rotation_load.rs`).

pub mod load;
pub mod observe;
pub mod replicas;
pub mod report;
