//! The netmod chosen when the job starts, among the ones built in.
//!
//! MPICH's Nemesis let one build carry several netmods and pick one at start
//! (`MPICH_NEMESIS_NETMOD`) through a table of function pointers consulted on every call; CH4
//! dropped the choice to get inlining back and told users to build once per network. This crate
//! gives the choice back without the table: [`AnyNetmod`] holds one of the netmods compiled in
//! (an enum), and its engine, [`AnyEngine`], answers every call with a `match` on the variant
//! whose arms call each netmod's own engine, inlined — no `dyn`, no function pointer. What the
//! device asked of a netmod at compile time (whether it matches natively, the largest tag)
//! becomes a question to the instance ([`P2p::native_matching`], [`P2p::tag_ub`]); over one
//! netmod named at build time those questions still fold to constants.
//!
//! `CH4_NETMOD` names the netmod (`tcp`, `ofi`, `ucx`) or asks for the best usable one
//! (`auto`, the default): libfabric, then UCX, then TCP, skipping one that cannot open here
//! (no library, no provider, no device), each skip logged with its reason and shown in the
//! settings summary. Every rank must run the same one: the choice travels in the business card
//! and a rank that chose another is a start-up error that names both.

use ch4_core::bootstrap::{Bootstrap, CardSource, PeerWatch};
use ch4_core::env::{self, Setting};
use ch4_core::request::{Message, ReqHandle};
use ch4_core::transport::{
    AmSink, AmTransport, Caps, Cx, Direct, HandlerId, Netmod, P2p, Partner, PeerRead, SendOp,
};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, PeerState, Result, Status, Tag};

#[cfg(not(any(feature = "tcp", feature = "ofi", feature = "ucx")))]
compile_error!("netmod-any needs at least one netmod feature: tcp, ofi or ucx");

/// The variable that chooses the netmod.
pub const NETMOD_VAR: &str = "CH4_NETMOD";

/// The settings of this crate.
pub const SETTINGS: &[Setting] = &[Setting::new(
    NETMOD_VAR,
    "auto",
    "the netmod between nodes, in a build with several: tcp, ofi, ucx, or auto (the best \
     usable here: ofi, then ucx, then tcp)",
)];

/// A netmod's name, whether or not this build has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `netmod_tcp`: active messages over sockets, matching in the core.
    Tcp,
    /// `netmod_ofi`: libfabric's tagged messages, matched by the provider.
    Ofi,
    /// `netmod_ucx`: UCX's tagged messages, matched by UCX.
    Ucx,
}

impl Kind {
    /// `auto`'s order of preference: the natively matching networks first.
    pub const PREFERENCE: [Kind; 3] = [Kind::Ofi, Kind::Ucx, Kind::Tcp];

    /// The name `CH4_NETMOD` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Ofi => "ofi",
            Kind::Ucx => "ucx",
        }
    }

    /// Whether this build has the netmod.
    pub fn built(self) -> bool {
        match self {
            Kind::Tcp => cfg!(feature = "tcp"),
            Kind::Ofi => cfg!(feature = "ofi"),
            Kind::Ucx => cfg!(feature = "ucx"),
        }
    }

    /// The netmods of this build, in `auto`'s order.
    pub fn built_in() -> impl Iterator<Item = Kind> {
        Self::PREFERENCE.into_iter().filter(|k| k.built())
    }

    fn code(self) -> u8 {
        match self {
            Kind::Tcp => 1,
            Kind::Ofi => 2,
            Kind::Ucx => 3,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        Self::PREFERENCE.into_iter().find(|k| k.code() == code)
    }
}

/// What `CH4_NETMOD` asks for: one netmod (`Some`), or the best usable one (`None`, `auto`).
/// A name that is not a netmod, or one this build lacks, is an error that lists the choices.
pub fn requested() -> Result<Option<Kind>> {
    let Some(v) = env::raw(NETMOD_VAR)? else {
        return Ok(None);
    };
    let v = v.trim().to_ascii_lowercase();
    if v == "auto" {
        return Ok(None);
    }
    let built = || {
        Kind::built_in()
            .map(Kind::name)
            .chain(["auto"])
            .collect::<Vec<_>>()
            .join(", ")
    };
    match Kind::PREFERENCE.into_iter().find(|k| k.name() == v) {
        Some(k) if k.built() => Ok(Some(k)),
        Some(k) => Err(env::bad(
            NETMOD_VAR,
            &v,
            &format!(
                "a netmod of this build ({} is not built in; built: {})",
                k.name(),
                built()
            ),
        )),
        None => Err(env::bad(
            NETMOD_VAR,
            &v,
            &format!("a netmod of this build: {}", built()),
        )),
    }
}

/// One of the netmods built in.
pub enum Inner {
    /// TCP, over one rail or the several `CH4_RAILS` names.
    #[cfg(feature = "tcp")]
    Tcp(netmod_rails::TcpRails),
    /// libfabric.
    #[cfg(feature = "ofi")]
    Ofi(netmod_ofi::OfiNetmod),
    /// UCX.
    #[cfg(feature = "ucx")]
    Ucx(netmod_ucx::UcxNetmod),
}

/// The netmod chosen at start: one of this build's, and how it was chosen (for the settings
/// summary).
pub struct AnyNetmod {
    inner: Inner,
    chosen: String,
}

#[cfg(feature = "tcp")]
impl From<netmod_tcp::TcpNetmod> for AnyNetmod {
    fn from(n: netmod_tcp::TcpNetmod) -> Self {
        AnyNetmod::new(Inner::Tcp(netmod_rails::Rails::single(n)))
    }
}

#[cfg(feature = "tcp")]
impl From<netmod_rails::TcpRails> for AnyNetmod {
    fn from(n: netmod_rails::TcpRails) -> Self {
        AnyNetmod::new(Inner::Tcp(n))
    }
}

#[cfg(feature = "ofi")]
impl From<netmod_ofi::OfiNetmod> for AnyNetmod {
    fn from(n: netmod_ofi::OfiNetmod) -> Self {
        AnyNetmod::new(Inner::Ofi(n))
    }
}

#[cfg(feature = "ucx")]
impl From<netmod_ucx::UcxNetmod> for AnyNetmod {
    fn from(n: netmod_ucx::UcxNetmod) -> Self {
        AnyNetmod::new(Inner::Ucx(n))
    }
}

/// `$body` with `$n` bound to the netmod inside `$inner`, whichever it is.
macro_rules! each {
    ($inner:expr, $n:ident => $body:expr) => {
        match $inner {
            #[cfg(feature = "tcp")]
            Inner::Tcp($n) => $body,
            #[cfg(feature = "ofi")]
            Inner::Ofi($n) => $body,
            #[cfg(feature = "ucx")]
            Inner::Ucx($n) => $body,
        }
    };
}

impl AnyNetmod {
    /// `inner`, named by `CH4_NETMOD` or by the program.
    pub fn new(inner: Inner) -> AnyNetmod {
        let mut n = AnyNetmod {
            inner,
            chosen: String::new(),
        };
        n.chosen = n.kind().name().to_string();
        n
    }

    /// Which netmod this is.
    pub fn kind(&self) -> Kind {
        match &self.inner {
            #[cfg(feature = "tcp")]
            Inner::Tcp(_) => Kind::Tcp,
            #[cfg(feature = "ofi")]
            Inner::Ofi(_) => Kind::Ofi,
            #[cfg(feature = "ucx")]
            Inner::Ucx(_) => Kind::Ucx,
        }
    }

    /// The netmod itself.
    pub fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The netmod itself, to configure it.
    pub fn inner_mut(&mut self) -> &mut Inner {
        &mut self.inner
    }

    /// Opens the netmod `CH4_NETMOD` asks for with `open`, or with `auto` the first of this
    /// build's (in [`Kind::PREFERENCE`]) that `open` opens, logging why each one before it
    /// could not. Fails with every reason when none opens.
    pub fn choose(mut open: impl FnMut(Kind) -> Result<AnyNetmod>) -> Result<AnyNetmod> {
        if let Some(k) = requested()? {
            let mut n = open(k).map_err(|e| {
                e.context(format!(
                    "{NETMOD_VAR}={}: the netmod did not open",
                    k.name()
                ))
            })?;
            n.chosen = format!("{} ({NETMOD_VAR})", k.name());
            return Ok(n);
        }
        let mut skipped = Vec::new();
        for k in Kind::built_in() {
            match open(k) {
                Ok(mut n) => {
                    n.chosen = if skipped.is_empty() {
                        format!("{} (auto)", k.name())
                    } else {
                        format!("{} (auto; {})", k.name(), skipped.join("; "))
                    };
                    return Ok(n);
                }
                Err(e) => {
                    tracing::warn!(netmod = k.name(), error = %e, "netmod not usable here, trying the next");
                    skipped.push(format!("{} skipped: {e}", k.name()));
                }
            }
        }
        Err(Error::new(
            ErrorKind::Transport,
            format!("no netmod of this build opens here: {}", skipped.join("; ")),
        ))
    }

    /// Opens the netmod `kind` as [`Bootstrap::open`] does.
    fn open_kind(kind: Kind, rank: Gpid, size: u32, key: u64, spans: bool) -> Result<AnyNetmod> {
        match kind {
            #[cfg(feature = "tcp")]
            Kind::Tcp => netmod_rails::TcpRails::open(rank, size, key, spans).map(Into::into),
            #[cfg(feature = "ofi")]
            Kind::Ofi => netmod_ofi::OfiNetmod::open(rank, size, key, spans).map(Into::into),
            #[cfg(feature = "ucx")]
            Kind::Ucx => netmod_ucx::UcxNetmod::open(rank, size, key, spans).map(Into::into),
            #[allow(unreachable_patterns)] // with every netmod built in
            other => Err(Error::new(
                ErrorKind::Arg,
                format!("the {} netmod is not built in", other.name()),
            )),
        }
    }
}

impl AmTransport for AnyNetmod {
    const AM_ORDERED: bool = {
        let mut ordered = true;
        #[cfg(feature = "tcp")]
        {
            ordered &= netmod_rails::TcpRails::AM_ORDERED;
        }
        #[cfg(feature = "ofi")]
        {
            ordered &= netmod_ofi::OfiNetmod::AM_ORDERED;
        }
        #[cfg(feature = "ucx")]
        {
            ordered &= netmod_ucx::UcxNetmod::AM_ORDERED;
        }
        ordered
    };
    const NAME: &'static str = "chosen at start (CH4_NETMOD)";

    #[inline(always)]
    fn eager_limit(&self) -> usize {
        each!(&self.inner, n => n.eager_limit())
    }
    #[inline(always)]
    fn am_max_payload(&self) -> usize {
        each!(&self.inner, n => n.am_max_payload())
    }
    #[inline(always)]
    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        each!(&mut self.inner, n => n.am_send(dest, handler, header, payload))
    }
    #[inline(always)]
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        each!(&mut self.inner, n => n.am_poll(sink, budget))
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        each!(&self.inner, n => n.peer_state(gpid))
    }
    fn settings(&self) -> Vec<(&'static str, String)> {
        let mut s = vec![(NETMOD_VAR, self.chosen.clone())];
        s.extend(each!(&self.inner, n => n.settings()));
        s
    }
    fn peer_failed(&self, gpid: Gpid) -> bool {
        each!(&self.inner, n => n.peer_failed(gpid))
    }
    #[inline(always)]
    fn has_queued_output(&self) -> bool {
        each!(&self.inner, n => n.has_queued_output())
    }
    fn close_connections(&mut self) {
        each!(&mut self.inner, n => n.close_connections())
    }
    fn arm_wakeup(
        &mut self,
        out: &mut Vec<ch4_core::transport::WaitFd>,
    ) -> ch4_core::transport::Arm {
        each!(&mut self.inner, n => n.arm_wakeup(out))
    }
    fn background_progress(&mut self, on: bool) {
        each!(&mut self.inner, n => n.background_progress(on))
    }
    #[inline(always)]
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        each!(&mut self.inner, n => n.can_send_now(dest, bytes))
    }
    #[inline(always)]
    fn can_stream_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        each!(&mut self.inner, n => n.can_stream_now(dest, bytes))
    }
    #[inline(always)]
    fn stream_piece(&self, crowded: bool) -> usize {
        each!(&self.inner, n => n.stream_piece(crowded))
    }
    #[inline(always)]
    fn first_piece(&self) -> usize {
        each!(&self.inner, n => n.first_piece())
    }
    #[inline(always)]
    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool {
        each!(&self.inner, n => n.offers_peer_read(dest, bytes))
    }
    #[inline(always)]
    fn read_pays(&self, bytes: usize, both_ways: bool) -> bool {
        each!(&self.inner, n => n.read_pays(bytes, both_ways))
    }
    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        each!(&mut self.inner, n => n.read_peer(src, addr, into))
    }
}

impl Netmod for AnyNetmod {
    type P2p = AnyEngine;
}

/// The engine of [`AnyNetmod`]: each call goes to the chosen netmod's own engine.
pub struct AnyEngine;

/// `Engine::$method(cx, args)` with `cx` lent to the netmod inside, its engine named per arm.
macro_rules! on_engine {
    ($cx:expr, $method:ident($($arg:expr),*)) => {{
        let Cx { core, transport, route, partner } = $cx;
        match &mut transport.inner {
            #[cfg(feature = "tcp")]
            Inner::Tcp(t) => {
                type M = netmod_rails::TcpRails;
                <<M as Netmod>::P2p as P2p<M>>::$method(
                    &mut Cx { core: &mut **core, transport: t, route: *route, partner: &mut **partner },
                    $($arg),*
                )
            }
            #[cfg(feature = "ofi")]
            Inner::Ofi(t) => {
                type M = netmod_ofi::OfiNetmod;
                <<M as Netmod>::P2p as P2p<M>>::$method(
                    &mut Cx { core: &mut **core, transport: t, route: *route, partner: &mut **partner },
                    $($arg),*
                )
            }
            #[cfg(feature = "ucx")]
            Inner::Ucx(t) => {
                type M = netmod_ucx::UcxNetmod;
                <<M as Netmod>::P2p as P2p<M>>::$method(
                    &mut Cx { core: &mut **core, transport: t, route: *route, partner: &mut **partner },
                    $($arg),*
                )
            }
        }
    }};
}

/// `Engine::$method(netmod)` for the netmod inside `$net`, its engine named per arm.
macro_rules! ask_engine {
    ($net:expr, $method:ident) => {{
        match &$net.inner {
            #[cfg(feature = "tcp")]
            Inner::Tcp(t) => {
                type M = netmod_rails::TcpRails;
                <<M as Netmod>::P2p as P2p<M>>::$method(t)
            }
            #[cfg(feature = "ofi")]
            Inner::Ofi(t) => {
                type M = netmod_ofi::OfiNetmod;
                <<M as Netmod>::P2p as P2p<M>>::$method(t)
            }
            #[cfg(feature = "ucx")]
            Inner::Ucx(t) => {
                type M = netmod_ucx::UcxNetmod;
                <<M as Netmod>::P2p as P2p<M>>::$method(t)
            }
        }
    }};
}

/// `$f(<engine of M>::$konst)` folded over the netmods built in.
macro_rules! fold_engines {
    ($init:expr, |$acc:ident, $v:ident| $f:expr, $konst:ident) => {{
        let mut $acc = $init;
        #[cfg(feature = "tcp")]
        {
            type M = netmod_rails::TcpRails;
            let $v = <<M as Netmod>::P2p as P2p<M>>::$konst;
            $acc = $f;
        }
        #[cfg(feature = "ofi")]
        {
            type M = netmod_ofi::OfiNetmod;
            let $v = <<M as Netmod>::P2p as P2p<M>>::$konst;
            $acc = $f;
        }
        #[cfg(feature = "ucx")]
        {
            type M = netmod_ucx::UcxNetmod;
            let $v = <<M as Netmod>::P2p as P2p<M>>::$konst;
            $acc = $f;
        }
        $acc
    }};
}

impl P2p<AnyNetmod> for AnyEngine {
    /// Whether any netmod built in matches natively: the device asks
    /// [`P2p::native_matching`] for the one chosen.
    const NATIVE_MATCHING: bool = fold_engines!(false, |any, v| any || v, NATIVE_MATCHING);
    /// The largest tag any netmod built in carries: the device asks [`P2p::tag_ub`] for the
    /// one chosen.
    const TAG_UB: Tag = fold_engines!(0, |ub, v| if v > ub { v } else { ub }, TAG_UB);

    #[inline(always)]
    fn native_matching(net: &AnyNetmod) -> bool {
        ask_engine!(net, native_matching)
    }
    #[inline(always)]
    fn tag_ub(net: &AnyNetmod) -> Tag {
        ask_engine!(net, tag_ub)
    }
    #[inline(always)]
    fn caps(net: &AnyNetmod) -> Caps {
        ask_engine!(net, caps)
    }
    #[inline(always)]
    fn isend<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, op: SendOp) -> Result<ReqHandle> {
        on_engine!(cx, isend(op))
    }
    #[inline(always)]
    fn irecv<P: Partner>(
        cx: &mut Cx<'_, AnyNetmod, P>,
        req: ReqHandle,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<()> {
        on_engine!(cx, irecv(req, want, from))
    }
    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, req: ReqHandle) -> Result<bool> {
        on_engine!(cx, cancel_recv(req))
    }
    fn cancel_send<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, req: ReqHandle) -> Result<()> {
        on_engine!(cx, cancel_send(req))
    }
    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, AnyNetmod, P>,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<Option<Status>> {
        on_engine!(cx, iprobe(want, from))
    }
    fn improbe<P: Partner>(
        cx: &mut Cx<'_, AnyNetmod, P>,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<Option<(Message, Status)>> {
        on_engine!(cx, improbe(want, from))
    }
    fn imrecv<P: Partner>(
        cx: &mut Cx<'_, AnyNetmod, P>,
        msg: Message,
        req: ReqHandle,
    ) -> Result<()> {
        on_engine!(cx, imrecv(msg, req))
    }
    #[inline(always)]
    fn send_ready<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, dest: Gpid, total: usize) -> bool {
        on_engine!(cx, send_ready(dest, total))
    }
    fn quiesce<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, req: ReqHandle) -> Result<()> {
        on_engine!(cx, quiesce(req))
    }
    fn discard<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>, msg: Message) -> Result<()> {
        on_engine!(cx, discard(msg))
    }
    #[inline(always)]
    fn progress<P: Partner>(cx: &mut Cx<'_, AnyNetmod, P>) -> Result<usize> {
        on_engine!(cx, progress())
    }
    #[inline(always)]
    fn recv_direct<P: Partner>(
        cx: &mut Cx<'_, AnyNetmod, P>,
        want: &Envelope,
        buf: &mut [u8],
    ) -> Result<Direct> {
        on_engine!(cx, recv_direct(want, buf))
    }
}

/// The chosen netmod's part of rank `rank`'s card, which must name the netmod `mine` as this
/// rank's does. Public for the fuzz targets (`fuzz/`): the card is another rank's bytes.
#[doc(hidden)]
pub fn inner_card(mine: Kind, rank: Gpid, card: &[u8]) -> Result<&[u8]> {
    let Some((&code, rest)) = card.split_first() else {
        return Err(Error::new(
            ErrorKind::Transport,
            format!("rank {rank} published an empty business card"),
        ));
    };
    match Kind::from_code(code) {
        Some(k) if k == mine => Ok(rest),
        Some(k) => Err(Error::new(
            ErrorKind::Transport,
            format!(
                "rank {rank} runs the {} netmod and this rank {}: every rank of a job must run \
                 the same one (set {NETMOD_VAR} alike)",
                k.name(),
                mine.name()
            ),
        )),
        None => Err(Error::new(
            ErrorKind::Transport,
            format!("rank {rank}'s business card names no netmod (code {code})"),
        )),
    }
}

impl Bootstrap for AnyNetmod {
    fn open(rank: Gpid, size: u32, job_key: u64, spans_nodes: bool) -> Result<Self> {
        AnyNetmod::choose(|k| AnyNetmod::open_kind(k, rank, size, job_key, spans_nodes))
    }

    /// The chosen netmod's card after one byte that names it.
    fn business_card(&self) -> Result<Vec<u8>> {
        let mut card = vec![self.kind().code()];
        card.extend(each!(&self.inner, n => n.business_card())?);
        Ok(card)
    }

    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()> {
        let mine = self.kind();
        let inner = cards
            .iter()
            .enumerate()
            .map(|(rank, card)| inner_card(mine, rank as Gpid, card).map(<[u8]>::to_vec))
            .collect::<Result<Vec<_>>>()?;
        each!(&mut self.inner, n => n.learn_cards(&inner))
    }

    /// The chosen netmod learns from `source` as it does alone (UCX on first contact, the
    /// others now), each card checked for naming the same netmod when it is read: a rank that
    /// chose another one is found at first contact with it instead of at start-up.
    fn learn_cards_from(&mut self, size: u32, mut source: CardSource) -> Result<()> {
        let mine = self.kind();
        let inner: CardSource =
            Box::new(move |g| inner_card(mine, g, &source(g)?).map(<[u8]>::to_vec));
        each!(&mut self.inner, n => n.learn_cards_from(size, inner))
    }

    fn watch_peers(&mut self, watch: PeerWatch) {
        each!(&mut self.inner, n => n.watch_peers(watch))
    }
}
