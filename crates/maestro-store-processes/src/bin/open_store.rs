//! A child process of the concurrent-open test (test support, not shipped): opens the store at
//! `URL` (creating and migrating it as any writing command does), prints `opened` and exits 0,
//! or prints the error and exits 1.
//!
//! Usage: `maestro-store-open URL`

use std::process::ExitCode;

use maestro_store::{Store, StoreUrl};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: maestro-store-open URL");
        return ExitCode::from(2);
    };
    let opened = match url.parse::<StoreUrl>() {
        Ok(url) => Store::open(&url).await,
        Err(e) => Err(e),
    };
    match opened {
        Ok(store) => {
            store.close().await;
            println!("opened");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
