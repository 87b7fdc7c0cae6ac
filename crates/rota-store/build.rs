//! `sqlx::migrate!` embeds the migrations at compile time; without this, adding a migration
//! alone would not rebuild the crate and the new SQL would be silently left out.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
