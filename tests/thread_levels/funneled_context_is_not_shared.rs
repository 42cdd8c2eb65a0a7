// At the funneled level only the thread that started the rank calls: its context cannot be
// shared with another thread either.
fn must_be_sync<T: Sync>(_: &T) {}

fn main() {
    ch4::threads::Threads::new(1)
        .thread_level(ch4::Funneled)
        .run(|ctx| {
            must_be_sync(&ctx);
            Ok(())
        })
        .unwrap();
}
