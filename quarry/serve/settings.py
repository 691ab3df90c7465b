"""Serving settings, parsed once at the edge (CLI, ``serve run`` args, Serve config file)
and passed down as plain data. Only this module reads the environment."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from quarry.core.records import TOP_K_CEILING, TOP_K_MAX
from quarry.core.search.settings import SearchSettings


class VerificationKey(BaseModel):
    """One key of a rotating set, chosen by the token header's ``kid``. HS256 holds a
    secret, RS256/ES256 a public PEM. After ``not_after`` (epoch seconds) it verifies nothing."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    kid: str = Field(min_length=1, max_length=200)
    alg: Literal["HS256", "RS256", "ES256"]
    secret: SecretStr | None = None
    public_key_pem: str | None = None
    not_after: float | None = None

    @model_validator(mode="after")
    def _material(self) -> "VerificationKey":
        if (self.alg == "HS256") != (self.secret is not None) or (self.alg != "HS256") != bool(self.public_key_pem):
            raise ValueError(f"key {self.kid!r}: HS256 takes secret, RS256/ES256 take public_key_pem (exactly one)")
        return self


class AuthSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    audience: str = "quarry"
    issuer: str = "quarry-dev"
    # At least one verification key. HS256 for development and single-party setups;
    # RS256 when an identity provider signs tokens and we hold only its public key.
    hs256_secret: SecretStr | None = None
    rs256_public_key_pem: str | None = None
    # A rotating key set: a token whose header names a ``kid`` is verified by that key only
    # (its alg fixed here, never by the token). Rotate by deploying {old}, {old, new}, {new}.
    keys: tuple[VerificationKey, ...] = ()
    # A JWKS source (https:// or file:// URL) for tokens whose kid is not in ``keys``: the key
    # set is re-fetched every jwks_refresh_s, and an unknown kid triggers at most one
    # re-fetch per jwks_cooldown_s. Only jwks_algorithms are accepted from it.
    jwks_uri: str | None = None
    jwks_algorithms: tuple[Literal["RS256", "ES256"], ...] = ("RS256",)
    jwks_refresh_s: float = Field(default=300.0, gt=0)
    jwks_cooldown_s: float = Field(default=30.0, ge=0)
    leeway_s: int = Field(default=0, ge=0, le=300)
    # The platform credential (cross-tenant /healthz): a JWT with its own audience, signed
    # with its own secret, so no tenant token can carry it. None disables the view.
    platform_hs256_secret: SecretStr | None = None
    platform_audience: str = "quarry-platform"
    # How long a Gateway replica trusts a verified token without re-verifying it (never past
    # its exp). Bounds how long a key removed from the configuration keeps admitting tokens.
    token_cache_s: float = Field(default=30.0, ge=0, le=3600)
    # A revocation list (fsspec URI, e.g. <index_root>/_auth/revocations.json) re-read at most
    # every revocation_check_s: a revoked token stops within revocation_check_s.
    revocation_uri: str | None = None
    revocation_check_s: float = Field(default=10.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _distinct_platform_key(self) -> "AuthSettings":
        if self.platform_hs256_secret is not None and (
                self.hs256_secret is not None
                and self.platform_hs256_secret.get_secret_value() == self.hs256_secret.get_secret_value()):
            raise ValueError("platform_hs256_secret must differ from hs256_secret (tenant tokens would pass)")
        if self.platform_audience == self.audience:
            raise ValueError("platform_audience must differ from audience")
        return self

    @model_validator(mode="after")
    def _one_key(self) -> "AuthSettings":
        if self.hs256_secret is None and not self.rs256_public_key_pem and not self.keys and not self.jwks_uri:
            raise ValueError("configure hs256_secret, rs256_public_key_pem, keys or jwks_uri")
        if len({k.kid for k in self.keys}) != len(self.keys):
            raise ValueError("key ids (kid) must be unique")
        return self

    @property
    def algorithms(self) -> tuple[str, ...]:
        algs = []
        if self.hs256_secret is not None:
            algs.append("HS256")
        if self.rs256_public_key_pem:
            algs.append("RS256")
        algs += [k.alg for k in self.keys if k.alg not in algs]
        if self.jwks_uri:
            algs += [a for a in self.jwks_algorithms if a not in algs]
        return tuple(algs)


class RequestLimits(BaseModel):
    """Ceilings checked before a request is parsed (``quarry/serve/http/limits.py``): bodies above
    ``max_body_bytes`` get 413, headers above ``max_header_bytes`` 431, JSON nested deeper
    than ``max_json_depth`` 400. The largest valid tool call written as UTF-8 (20 claims of
    4,400 characters at 4 bytes each, about 352 KB) stays under the default body limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(default=512 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    max_json_depth: int = Field(default=32, ge=4, le=512)


class TenantOverride(BaseModel):
    """One tenant's limits where they differ from the defaults (``TenantLimits.overrides``);
    a field left unset keeps the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests_per_tenant: int | None = Field(default=None, ge=1, description="requests per window, whole tenant")
    requests_per_subject: int | None = Field(default=None, ge=1, description="requests per window, one subject")
    concurrent_per_tenant: int | None = Field(default=None, ge=1, description="requests in flight, whole tenant")
    runs_open_per_tenant: int | None = Field(default=None, ge=1, description="open runs, whole tenant")
    runs_open_per_subject: int | None = Field(default=None, ge=1, description="open runs, one subject")


class TenantLimits(BaseModel):
    """Per-tenant and per-subject request rates and per-tenant concurrency at the Gateway
    (``quarry/serve/http/ratelimit.py``), keyed by the verified principal only, on REST and
    MCP alike. Counters live in the replica's memory, or in Redis when ``redis_url`` is set
    (every Gateway replica then shares them). Past a limit: 429 with ``Retry-After`` and a
    body naming the limit. Also the label bound of the per-tenant metrics."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="false: no rate or concurrency limit (run quotas still hold)")
    strategy: Literal["moving-window", "fixed-window"] = Field(
        default="moving-window", description="the limits library's strategy: exact moving window, or cheaper fixed")
    window_s: int = Field(default=60, ge=1, le=86_400, description="the rate window, seconds")
    requests_per_tenant: int = Field(default=60_000, ge=1, description="tool calls per window, per tenant")
    requests_per_subject: int = Field(default=30_000, ge=1, description="tool calls per window, per tenant/subject")
    concurrent_per_tenant: int = Field(default=512, ge=1, description="tool calls in flight at once, per tenant")
    concurrency_lease_s: float = Field(default=120.0, gt=0,
                                       description="Redis: a slot a dead replica never released frees after this")
    overrides: dict[str, TenantOverride] = Field(default_factory=dict,
                                                 description="tenant -> its own limits (rates, concurrency, runs)")
    metrics_top_tenants: int = Field(default=20, ge=1, le=1000,
                                     description="per-tenant metric labels: the top N tenants by traffic, else 'other'")

    def override(self, tenant: str) -> TenantOverride:
        return self.overrides.get(tenant) or _NO_OVERRIDE

    def requests(self, tenant: str) -> tuple[int, int]:
        """(per tenant, per subject) requests per window for ``tenant``."""
        o = self.override(tenant)
        return (o.requests_per_tenant or self.requests_per_tenant, o.requests_per_subject or self.requests_per_subject)

    def concurrency(self, tenant: str) -> int:
        return self.override(tenant).concurrent_per_tenant or self.concurrent_per_tenant


_NO_OVERRIDE = TenantOverride()


class ServeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index_root: str
    auth: AuthSettings
    gateway_replicas: int = Field(default=1, ge=1)
    retriever_replicas: int = Field(default=1, ge=1)
    max_ongoing_requests: int = Field(default=16, ge=1)
    # -- tenant caches (per replica) --------------------------------------------------
    # At most lru_tenants tenants per Retriever replica (also Serve's
    # max_num_models_per_replica: requests carry the tenant as multiplexed_model_id, so Serve
    # routes a tenant to replicas that have it loaded) and at most tenant_cache_bytes of
    # them, charged by each index's resident estimate (heap + memory-mapped file bytes);
    # least recently used tenants go first. CURRENT is re-read at most every
    # generation_check_ms so a publish is picked up without a restart.
    lru_tenants: int = Field(default=256, ge=1)
    # false: the Gateway calls the Retriever without the tenant as multiplexed_model_id, so
    # Serve routes without regard to tenant (the baseline of quarry.eval.bench_tenants --routing)
    tenant_routing: bool = True
    tenant_cache_bytes: int = Field(default=1 << 30, ge=1)
    # Remote shards (an index_root URI) are copied to disk_cache_dir (default: the temp dir);
    # disk_cache_bytes bounds it, least recently used copies not in use evicted (None: unbounded).
    disk_cache_dir: str | None = None
    disk_cache_bytes: int | None = Field(default=None, ge=1)
    generation_check_ms: int = Field(default=1000, ge=0)
    embedder: str = Field(default="auto", description="auto (from the manifest), hashing, or sentence-transformers")
    embedder_path: str | None = None
    hashing_dim: int = 256
    # Dense leg device. "gpu"/"auto" use GPU FAISS only after the build proves at load that
    # it enforces IDSelector (quarry.core.index.dense_gpu); otherwise CPU, with the reason in /healthz.
    dense_device: Literal["cpu", "gpu", "auto"] = "cpu"
    retriever_num_gpus: float = Field(default=0.0, ge=0)
    # Query encoding in the Retriever: the backend ("index": the one that built the index;
    # an ONNX one must agree with torch at load), a vector cache (0 = off) and @serve.batch
    # across concurrent searches (max_ongoing_requests is raised to cover a batch).
    query_encoder: Literal["index", "torch", "onnx", "onnx-int8"] = "index"
    query_cache_size: int = Field(default=4096, ge=0)
    encode_batch_size: int = Field(default=16, ge=1)
    encode_batch_wait_ms: float = Field(default=2.0, ge=0)
    # Second stage (the Reranker deployment). Per tenant and generation it serves the
    # learned ranker that tenant's promotion gate enabled; otherwise the cross-encoder
    # built by reranker_factory ("module:callable" -> quarry.core.rank.rerank.Reranker, kwargs
    # reranker_options); otherwise nothing (the fused order stands, the response says so).
    # reranker_enabled: false deploys no Reranker at all.
    reranker_enabled: bool = True
    learned_ranker: bool = True
    reranker_factory: str | None = None
    reranker_options: dict[str, Any] = Field(default_factory=dict)  # kwargs for the factory
    reranker_batch_size: int = Field(default=16, ge=1)
    reranker_num_gpus: float = Field(default=0.0, ge=0)
    reranker_num_cpus: float = Field(default=1.0, ge=0)
    reranker_timeout_s: float = Field(default=10.0, gt=0, description="past this the fused order is served")
    stage_check_s: float = Field(default=30.0, ge=0, description="re-read a generation's gate decision this often")
    # Fused candidates handed to the second stage: search.candidate_width by default; a
    # request may ask for up to this many.
    candidate_width_ceiling: int = Field(default=100, ge=1, le=1000)
    # The search configuration, validated here; its top_k_ceiling defaults to this
    # server's top_k_ceiling (below).
    search: SearchSettings = Field(default_factory=SearchSettings)
    # Ray Serve options per deployment name (Gateway, Retriever, Reranker): autoscaling_config,
    # max_ongoing_requests, ray_actor_options, as `quarry plan` writes them into a Serve
    # config's `deployments` list. They override the builder's defaults.
    deployment_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    run_budget: int = Field(default=3, ge=1, le=20)
    top_k_ceiling: int = Field(default=TOP_K_CEILING, ge=1, le=TOP_K_MAX)
    limits: RequestLimits = Field(default_factory=RequestLimits)
    # Per-tenant rate, concurrency and open-run limits, their per-tenant overrides and the
    # per-tenant metric label bound, in one block (docs/operations.md, "Tenant limits").
    tenant_limits: TenantLimits = Field(default_factory=TenantLimits)
    # Traces keep a hash of the query plus at most this many characters of a redacted form
    # (digits masked, identifiers and emails replaced); 0 keeps the hash only.
    trace_query_chars: int = Field(default=80, ge=0, le=500)
    ray_namespace: str = "quarry"
    # Ray Serve's throughput-optimized mode (RAY_SERVE_THROUGHPUT_OPTIMIZED=1: gRPC between
    # deployments, user code on the replica's loop, buffered request logs, GC frozen after
    # start-up; see launch.throughput_env). Ray reads it from the environment when it
    # starts, so it applies where quarry starts Ray itself (``quarry serve``, ``quarry
    # demo``, ``launch.start`` without an address); a cluster gets it from its own
    # environment (the KubeRay manifest sets it). Measured against standard Serve: README,
    # Overhead.
    throughput_optimized: bool = True
    # With it, direct ingress: each Gateway replica also serves HTTP on a port of its own
    # (launch.ingress_urls), so a client calling it skips the proxy and its per-request call
    # back for disconnects. The proxy on the configured port stays: the stable address
    # that balances over all Gateway replicas and follows a replaced one.
    direct_ingress: bool = True
    # How long a stopping Gateway replica keeps its own port open so a load balancer in
    # front can deregister it (Ray's default: 30 s). One machine has none; raise it behind one.
    direct_ingress_drain_s: float = Field(default=2.0, ge=0, le=600)
    store_name_prefix: str = "quarry"  # run-store actor name and Redis key prefix; tests vary it
    # -- run and trace stores (quarry/serve/stores/runstore.py, quarry/serve/stores/tracestore.py) -------------------
    run_store: Literal["actor", "redis"] = "actor"
    redis_url: str | None = Field(default=None, description="redis://host:6379/0 when run_store is redis")
    state_dir: str | None = Field(default=None, description="actor checkpoints; default <index_root>/_serve/runs")
    run_ttl_s: int = Field(default=3600, ge=10, description="a run expires this long after it was created")
    run_idle_s: int = Field(default=900, ge=1,
                            description="an open run with no call for this long is closed, freeing its quota slot")
    runs_open_per_tenant: int = Field(default=10_000, ge=1, description="open runs per tenant; beyond: 429")
    runs_open_per_subject: int = Field(default=100, ge=1, description="open runs per tenant/subject; beyond: 429")
    runs_kept_per_tenant: int = Field(default=20_000, ge=1,
                                      description="open + finished runs held per tenant (own oldest finished go)")
    store_timeout_s: float = Field(default=10.0, gt=0, description="past this a store call fails closed")
    trace_dir: str | None = Field(default=None, description="append-only traces; default <index_root>/_traces")
    trace_retention_h: int = Field(default=168, ge=1, description="hour files older than this are deleted")
    traces_per_tenant_hour: int = Field(default=100_000, ge=1,
                                        description="per tenant, hour and replica; past it that tenant's traces drop")
    trace_flush_ms: int = Field(default=200, ge=1, description="buffered traces reach disk within this")
    gateway_num_cpus: float = Field(default=0.25, ge=0)
    retriever_num_cpus: float = Field(default=0.5, ge=0)
    resolver_num_cpus: float = Field(default=0.1, ge=0, description="resolution is light CPU work over a few passages")
    health_check_period_s: float = Field(default=10.0, gt=0, description="Serve calls check_health this often")
    health_check_timeout_s: float = Field(default=30.0, gt=0)
    # -- admin API (quarry/serve/http/admin.py; platform credential only) -------------------
    # Change records the admin API accepts are appended under <index_root>/<changes_dir>/<tenant>/,
    # one JSON-lines file per request, for `quarry apply-changes --changes <index_root>/<changes_dir>`.
    changes_dir: str = Field(default="_changes", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
                             description="change-log folder under index_root (one sub-folder per tenant)")
    reconcile_source: str | None = Field(default=None, description="source of truth POST .../reconciliation "
                                                                   "compares with (unset: refused with 409)")
    admin_job_timeout_s: float = Field(default=3600.0, gt=0, description="an admin job running longer is killed")
    mcp_enabled: bool = True
    mcp_resource_url: str | None = Field(default=None, description="public URL of /mcp (protected-resource metadata)")
    mcp_authorization_servers: list[str] = Field(default_factory=list,
                                                 description="issuer URLs advertised to MCP clients")

    @model_validator(mode="after")
    def _stores(self) -> "ServeSettings":
        if self.runs_kept_per_tenant < self.runs_open_per_tenant:
            raise ValueError("runs_kept_per_tenant must be at least runs_open_per_tenant (open runs are never evicted)")
        for t, o in self.tenant_limits.overrides.items():
            if (o.runs_open_per_tenant or 0) > self.runs_kept_per_tenant:
                raise ValueError(f"tenant_limits.overrides[{t!r}].runs_open_per_tenant exceeds runs_kept_per_tenant")
        if self.run_store == "redis" and not self.redis_url:
            raise ValueError("run_store 'redis' needs redis_url (e.g. redis://127.0.0.1:6379/0)")
        # Traces and the actor run store's checkpoint follow the index root (a URI root: objects
        # readable from every node, so an actor re-created on another node reads its runs).
        return self

    def runs_open_for(self, tenant: str) -> tuple[int, int]:
        """(per tenant, per subject) open-run limits for ``tenant``, overrides applied."""
        o = self.tenant_limits.override(tenant)
        return (o.runs_open_per_tenant or self.runs_open_per_tenant,
                o.runs_open_per_subject or self.runs_open_per_subject)

    @property
    def run_state_dir(self) -> str:
        """The actor run store's checkpoint: ``state_dir``, else ``<index_root>/_serve/runs``
        (a URI root keeps its scheme: the checkpoint is objects there, not node-local)."""
        if self.state_dir:
            return self.state_dir
        if "://" in self.index_root:
            return self.index_root.rstrip("/") + "/_serve/runs"
        return str(Path(self.index_root) / "_serve" / "runs")

    @property
    def changes_root(self) -> str:
        return f"{self.index_root.rstrip('/')}/{self.changes_dir}"

    @property
    def trace_root(self) -> str:
        """Where traces go: ``trace_dir``, else ``<index_root>/_traces`` (a URI root keeps its scheme)."""
        if self.trace_dir:
            return self.trace_dir
        if "://" in self.index_root:
            return self.index_root.rstrip("/") + "/_traces"
        return str(Path(self.index_root) / "_traces")

    @model_validator(mode="before")
    @classmethod
    def _search_ceiling(cls, data: Any) -> Any:
        """``search.top_k_ceiling`` is the server's ``top_k_ceiling`` unless set itself."""
        if not isinstance(data, dict):
            return data
        ceiling = data.get("top_k_ceiling", TOP_K_CEILING)
        search = data.get("search")
        if search is None or isinstance(search, dict):
            return {**data, "search": {"top_k_ceiling": ceiling, **(search or {})}}
        if isinstance(search, SearchSettings) and "top_k_ceiling" not in search.model_fields_set:
            return {**data, "search": search.model_copy(update={"top_k_ceiling": ceiling})}
        return data

    @model_validator(mode="after")
    def _widths(self) -> "ServeSettings":
        width = self.search.candidate_width
        if width > self.candidate_width_ceiling:
            raise ValueError(f"search.candidate_width {width} exceeds candidate_width_ceiling "
                             f"{self.candidate_width_ceiling}")
        return self


def dev_secret_path() -> Path:
    return Path(os.environ.get("QUARRY_HOME", Path.home() / ".quarry")) / "dev-jwt-secret"


def load_dev_secret(create: bool = True) -> str:
    """The local development HS256 secret shared by ``quarry serve`` and ``quarry token``:
    ``QUARRY_JWT_SECRET`` if set, else a random key kept in ``$QUARRY_HOME/dev-jwt-secret``."""
    env = os.environ.get("QUARRY_JWT_SECRET")
    if env:
        return env
    path = dev_secret_path()
    if path.exists():
        return path.read_text().strip()
    if not create:
        raise FileNotFoundError(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key


def settings_from_args(args: dict[str, Any] | ServeSettings | None = None) -> ServeSettings:
    """Build settings from ``serve run``/config ``args`` (flat or nested) plus the environment.

    Flat keys ``jwt_secret``, ``jwt_public_key_file``, ``audience`` and ``issuer`` fill the auth
    block; ``QUARRY_INDEX_ROOT``, ``QUARRY_JWT_PUBLIC_KEY_FILE`` and the dev secret are the
    fallbacks, and ``QUARRY_REDIS_URL`` for ``redis_url``. Strings from the command line are coerced by pydantic."""
    if isinstance(args, ServeSettings):
        return args
    data = dict(args or {})
    auth = dict(data.pop("auth", {}) or {})
    if "jwt_secret" in data:
        auth["hs256_secret"] = data.pop("jwt_secret")
    pub_file = data.pop("jwt_public_key_file", None) or os.environ.get("QUARRY_JWT_PUBLIC_KEY_FILE")
    if pub_file and "rs256_public_key_pem" not in auth:
        auth["rs256_public_key_pem"] = Path(pub_file).read_text()
    if "platform_secret" in data:
        auth["platform_hs256_secret"] = data.pop("platform_secret")
    elif os.environ.get("QUARRY_PLATFORM_SECRET") and "platform_hs256_secret" not in auth:
        auth["platform_hs256_secret"] = os.environ["QUARRY_PLATFORM_SECRET"]
    for k in ("audience", "issuer"):
        if k in data:
            auth[k] = data.pop(k)
    if not ({"hs256_secret", "rs256_public_key_pem", "keys", "jwks_uri"} & auth.keys()):
        auth["hs256_secret"] = load_dev_secret()
    data.setdefault("index_root", os.environ.get("QUARRY_INDEX_ROOT", "indexes"))
    if os.environ.get("QUARRY_REDIS_URL") and not data.get("redis_url"):
        data["redis_url"] = os.environ["QUARRY_REDIS_URL"]  # a cluster's Secret (credentials in the URL)
    return ServeSettings(auth=AuthSettings(**auth), **data)
