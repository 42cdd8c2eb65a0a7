// Even at the multiple level, a request borrowing a buffer for a scope stays on the thread of
// its scope (the scope completes it before the borrow ends); a worker opens its own scope.
fn must_be_send<T: Send>(_: T) {}

fn main() {
    ch4::threads::Threads::new(1)
        .thread_level(ch4::Multiple)
        .run(|ctx| {
            let world = ctx.world();
            let mut buf = [0u8; 4];
            ctx.scope(|s| {
                let req = world.irecv(s, &mut buf, 0, 0).unwrap();
                must_be_send(req);
            });
            Ok(())
        })
        .unwrap();
}
