"""How ``init_process_group("kolo")`` finds the job: kolo's communicator and torch's store.

Two ways in, both ending with one kolo communicator (kolo.basics, shared with
``kolo.torch``'s Horovod API) whose rank and size equal torch's:

1. torch's own rendezvous ran (``env://`` with MASTER_ADDR/MASTER_PORT,
   ``tcp://``, ``file://`` or an explicit ``store=``): torch's store exists
   and rank 0 hosts it. Under kolorun (KOLO_*; kolorun sets MASTER_ADDR and
   MASTER_PORT too, on a port free on rank 0's host) or with
   KOLO_STORE_ADDR, kolo's discovery already knows where its own store is.
   Otherwise (real torchrun among them) torch's TCPStore holds MASTER_PORT,
   so rank 0 picks a free port for kolo's store and announces it (at its
   KOLO_IFACE address when that is set, else MASTER_ADDR), with a random job
   secret, through torch's store; every rank then runs kolo's init with
   torchrun-style variables (RANK, WORLD_SIZE, KOLO_STORE_ADDR) set for that
   call only.
2. ``env://`` without MASTER_ADDR and MASTER_PORT — under mpirun, srun, or
   one plain process — where torch's handler would stop with
   "environment variable MASTER_ADDR expected". ``install_env_handler()``
   wraps torch's env:// handler: kolo's init discovers rank and size, rank 0
   starts a TCPStore on a free port and broadcasts its address with kolo, and
   torch gets that store. This applies to any backend (a gloo group can be
   started this way too, at the cost of a kolo communicator).
"""
import importlib
import secrets
import socket

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from kolo import _C, basics, settings

_STORE_KEY = "kolo/process_group/store"
_ADDR_BYTES = 512


def _free_port():
    """A port nobody listens on now, inside KOLO_PORT_RANGE when that is set
    (kolo.h's free_port: a cluster's firewall may admit only that range). The
    server binds it moments later: a process that takes it in between makes
    that fail loudly, not hang."""
    return _C.free_port()


def _kolo_knows_its_store():
    """kolorun (or the user) named kolo's store. Under torchrun kolo's own
    discovery would take MASTER_PORT+1, a port nobody reserved: when torchrun
    picked MASTER_PORT (--standalone, its agents' store), MASTER_PORT+1 lies in
    the ephemeral range, where the kernel hands even ports to outgoing
    connections, and one of them may hold it. torch's store is at hand here,
    so kolo's store goes on a port that was free, published through it, as
    gloo and nccl publish their addresses."""
    return settings.store_named()


def _host_for_peers(published_host):
    """Rank 0's address as seen from this rank: loopback on rank 0's own host."""
    host, _, name = published_host.partition("/")
    return "127.0.0.1" if name == socket.gethostname() else host


def _init_through_torch_store(store, rank, size):
    # torchrun's agents keep one store for all restart rounds (torch >= 2.4
    # hands the workers the agents' own): a key per round, which rank 0
    # deletes once every rank has read it, for a round that follows a change
    # of members keeps the restart count.
    key = f"{_STORE_KEY}/{settings.torchelastic_restart_count()}"
    if rank == 0:
        # Where the peers reach kolo (KOLO_IFACE), else where they reach torch.
        host = _C.iface_address() or settings.master_addr() or socket.gethostname()
        # The job's key is sent in the clear through torch's store, which is
        # no weaker than the key kolo would derive from public job facts.
        secret = settings.secret() or secrets.token_hex(16)
        store.set(key, f"{host}/{socket.gethostname()} {_free_port()} {secret}")
    published_host, port, secret = store.get(key).decode().split()
    changes = {"RANK": str(rank), "WORLD_SIZE": str(size),
               "KOLO_STORE_ADDR": f"{_host_for_peers(published_host)}:{port}",
               "KOLO_SECRET": settings.secret() or secret,
               # kolo finds the ranks that share a host itself; a partial pair
               # (LOCAL_RANK without LOCAL_WORLD_SIZE) would be an error there.
               "LOCAL_RANK": None, "LOCAL_WORLD_SIZE": None}
    with settings.changed(changes):
        basics.init()
    if rank == 0:  # init() returned: every rank reached kolo's store, so read the key
        store.delete_key(key)


def communicator_for(store, rank, size, global_ranks=(), name=""):
    """kolo's communicator for a torch group of this rank and size (initialises
    kolo if needed). global_ranks: the group's world ranks when it is a
    subgroup (torch's new_group, whose creator only its members run): a kolo
    group over them, formed by the members alone under torch's group name."""
    if not basics.is_initialized():
        if global_ranks:
            raise RuntimeError(f"kolo: a subgroup of ranks {list(global_ranks)} was requested before the "
                               "default group: call init_process_group('kolo') first")
        if _kolo_knows_its_store():
            basics.init()
        else:
            _init_through_torch_store(store, rank, size)
    comm = basics.comm_of_world()
    if global_ranks and list(global_ranks) != list(range(comm.size())):
        comm = comm.group(list(global_ranks), f"torch.{name}")
    if comm.size() != size:
        raise RuntimeError(
            f"kolo rank {comm.rank()}: a process group of {size} ranks was requested, but kolo's "
            f"communicator has {comm.size()}")
    if comm.rank() != rank:
        raise RuntimeError(
            f"kolo rank {comm.rank()}: torch gives this process rank {rank}, kolo rank "
            f"{comm.rank()}: the launcher's variables disagree with torch's rank (or the group "
            "reorders ranks, which the kolo backend does not support)")
    return comm


def _query(url):
    from urllib.parse import parse_qs, urlparse
    return {k: int(v[-1]) for k, v in parse_qs(urlparse(url).query).items() if k in ("rank", "world_size")}


def broadcast_endpoint(comm, port):
    """(host, port) on every rank of a server that rank 0 listens on at port
    (ignored elsewhere), sent over kolo's communicator: loopback when every
    rank is on rank 0's host, else its address on KOLO_IFACE's interface when
    that is set (as kolo's own connections), else its host name."""
    buf = torch.zeros(_ADDR_BYTES, dtype=torch.uint8, device="cpu")
    if comm.rank() == 0:
        host = "127.0.0.1" if comm.local_size() == comm.size() else (_C.iface_address() or socket.gethostname())
        text = f"{host} {port}".encode()
        buf[:len(text)] = torch.tensor(list(text), dtype=torch.uint8, device="cpu")
    comm.broadcast(buf.data_ptr(), _ADDR_BYTES, _C.U8, 0)
    host, port = bytes(buf.tolist()).rstrip(b"\0").decode().split()
    return host, int(port)


def _kolo_env_rendezvous(url, timeout):
    basics.init()
    comm = basics.comm()
    rank, size = comm.rank(), comm.size()
    asked = _query(url)
    for key, mine in (("rank", rank), ("world_size", size)):
        if key in asked and asked[key] not in (-1, mine):
            raise ValueError(f"kolo rank {rank}: init_process_group({key}={asked[key]}) disagrees "
                             f"with the launcher, which gives {key} {mine}")
    server = dist.TCPStore("0.0.0.0", _free_port(), size, True, timeout, wait_for_workers=False) \
        if rank == 0 else None
    host, port = broadcast_endpoint(comm, server.port if server else 0)
    store = server or dist.TCPStore(host, port, size, False, timeout)
    yield store, rank, size
    raise RuntimeError("kolo: env:// cannot rendezvous again (re-rendezvous is not supported)")


def _port_taken_explained(rendezvous):
    """torch's env:// rendezvous, whose store rank 0 hosts on MASTER_PORT. Under
    kolorun that port was free on this host when the job started, so a rank 0
    that cannot bind it almost always has a twin: a second process started with
    rank 0 by a program that starts its own workers (its other ranks' twins get
    kolo's "already taken" at init). Says so instead of torch's bare EADDRINUSE."""
    try:
        first = next(rendezvous)
    except RuntimeError as e:
        if not settings.kolorun_var("KOLO_RANK") or "address already in use" not in str(e).lower():
            raise
        raise RuntimeError(
            f"kolo rank {settings.kolorun_var('KOLO_RANK')}: torch's store cannot listen on MASTER_PORT="
            f"{settings.master_port()}, which kolorun found free on this host: another process took it, "
            "most likely a second process with this rank — does the program start its own workers under "
            "kolorun (torch.multiprocessing.spawn, Lightning's strategy \"ddp_spawn\")? Let kolorun start "
            f"every rank: in Lightning, strategy \"ddp\" or \"ddp_kolo\" ({e})") from e
    yield first
    yield from rendezvous


def install_env_handler():
    """Wraps torch's env:// handler so that it works without MASTER_ADDR/MASTER_PORT."""
    # importlib: the attribute torch.distributed.rendezvous is the function.
    handlers = getattr(importlib.import_module("torch.distributed.rendezvous"), "_rendezvous_handlers", None)
    if handlers is None or getattr(handlers.get("env"), "_kolo", False):
        return
    torch_env = handlers["env"]

    def env_handler(url, timeout=default_pg_timeout, **kwargs):
        if settings.master_addr() or settings.master_port():
            return _port_taken_explained(torch_env(url, timeout=timeout, **kwargs))
        return _kolo_env_rendezvous(url, timeout)

    env_handler._kolo = True
    handlers["env"] = env_handler
