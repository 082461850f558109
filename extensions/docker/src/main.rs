//! `oc-docker-extension`: the docker container provider, served over stdio
//! (`oc-docker-extension __docker-attach …`: a run's attach client).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_docker::main());
}
