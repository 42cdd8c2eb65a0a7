// At the funneled level only the thread that started the rank calls: its context cannot be
// shared with a scoped thread either.
fn main() {
    ch4::threads::Threads::new(1)
        .thread_level(ch4::Funneled)
        .run(|ctx| {
            std::thread::scope(|s| {
                s.spawn(|| ctx.world().barrier());
            });
            Ok(())
        })
        .unwrap();
}
