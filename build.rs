// The migrations are embedded by `sqlx::migrate!`, which cannot tell cargo
// that a new file in their folders must rebuild the crate: this does.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
