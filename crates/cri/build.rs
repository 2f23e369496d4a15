//! Compiles the CRI v1 proto (`proto/api.proto`, kubernetes/cri-api's `pkg/apis/runtime/v1`) into
//! the server traits, the clients and the messages, and NRI's proto (`proto/nri.proto`,
//! containerd/nri v0.12.1's `pkg/api`) into its messages only (its services run over ttrpc,
//! which `nri::ttrpc` frames by hand), with the protoc that `protoc-bin-vendored` ships, so that
//! no system protoc is needed.

fn main() {
    let protoc = protoc_bin_vendored::protoc_bin_path()
        .expect("protoc-bin-vendored has a protoc for this host");
    // prost-build reads PROTOC from the environment.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        // The client is the node agent's (`podlab node --runtime-endpoint`), on its own
        // HTTP/2 connection: no tonic transport.
        .build_client(true)
        .build_transport(false)
        .compile_protos(&["proto/api.proto"], &["proto"])
        .expect("compiling proto/api.proto");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_protos(&["proto/nri.proto"], &["proto"])
        .expect("compiling proto/nri.proto");
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/nri.proto");
}
