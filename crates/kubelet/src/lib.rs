//! podlab-kubelet
