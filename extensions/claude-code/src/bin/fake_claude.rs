//! `fake-claude`: see [`oc_claude_code::fake`].

fn main() {
    std::process::exit(oc_claude_code::fake::run());
}
