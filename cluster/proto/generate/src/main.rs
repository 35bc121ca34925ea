//! Writes the Rust code of etcd's gRPC API that `sluice-cluster` compiles (`cluster/src/etcd/pb/`)
//! from the `.proto` files in `cluster/proto/etcd/`. Kept in the repository so that building Sluice
//! needs no `protoc`; run again after changing a `.proto` file:
//!
//!     bash cluster/proto/generate.sh   (which also records what it generated from)
//!
//! With `--check` it writes into a temporary directory and fails if the kept files differ.

use std::path::{Path, PathBuf};

const PROTOS: [&str; 3] = ["etcd/mvccpb/kv.proto", "etcd/etcdserverpb/rpc.proto", "etcd/v3electionpb/v3election.proto"];
const FILES: [&str; 3] = ["mvccpb.rs", "etcdserverpb.rs", "v3electionpb.rs"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let cluster = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let proto_root = cluster.join("proto");
    let kept = cluster.join("src/etcd/pb");
    let out: PathBuf = if check { std::env::temp_dir().join(format!("sluice-etcd-pb-{}", std::process::id())) } else { kept.clone() };
    std::fs::create_dir_all(&out)?;

    let fds = protox::compile(PROTOS.map(|p| proto_root.join(p)), [&proto_root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_fds(fds)?;

    if check {
        let mut stale = Vec::new();
        for file in FILES {
            if std::fs::read(out.join(file))? != std::fs::read(kept.join(file)).unwrap_or_default() {
                stale.push(file);
            }
        }
        std::fs::remove_dir_all(&out)?;
        if !stale.is_empty() {
            return Err(format!(
                "cluster/src/etcd/pb/{{{}}} differ from what cluster/proto/ generates: run `cargo run --manifest-path cluster/proto/generate/Cargo.toml`",
                stale.join(",")
            )
            .into());
        }
        println!("cluster/src/etcd/pb/ matches cluster/proto/");
    } else {
        println!("wrote {}", FILES.map(|f| format!("cluster/src/etcd/pb/{f}")).join(", "));
    }
    Ok(())
}
