"""Builds every part of the service from Settings.

No import-time singletons: tests build their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posthaste.adapters.dkim_keys import KeyProviders
from posthaste.adapters.dns import Resolver, registered_domain
from posthaste.adapters.mail_auth import MessageAuthenticator
from posthaste.adapters.mta_sts_http import PolicyFetcher
from posthaste.adapters.transports import TransportRegistry, build_transports
from posthaste.adapters.webhook_http import HostLookup, WebhookClient
from posthaste.config import Settings
from posthaste.core.attachment_links import (
    RAW_LINK_PURPOSE,
    RECEIVED_LINK_PURPOSE,
    AttachmentLinks,
)
from posthaste.core.crypto import WEBHOOK_SECRET_PURPOSE, SecretBox
from posthaste.core.dkim import SigningKeys
from posthaste.core.templates import ParseCache
from posthaste.core.tracking import TrackingLinks
from posthaste.core.unsubscribe import UnsubscribeLinks
from posthaste.core.verp import verp_signer
from posthaste.errors import ConfigError
from posthaste.services.api_keys import ApiKeyService
from posthaste.services.attempts import AttemptQueries
from posthaste.services.automation_steps import StepRunner
from posthaste.services.automations import AutomationService
from posthaste.services.broadcasts import BroadcastService
from posthaste.services.contact_imports import ContactImportService
from posthaste.services.contacts import ContactService
from posthaste.services.delivery import DeliveryService
from posthaste.services.delivery_rules import (
    DomainTlsRules,
    DomainTrackingRules,
    TlsRules,
    TrackingRules,
)
from posthaste.services.destinations import DestinationQueries, DestinationThrottle
from posthaste.services.domains import DomainService
from posthaste.services.emails import EmailChanges, EmailQueries
from posthaste.services.event_definitions import EventDefinitionService
from posthaste.services.event_stream import EventStream
from posthaste.services.idempotency import IdempotencyService
from posthaste.services.inbound import InboundService, ReceivedQueries
from posthaste.services.metrics import Metrics, MetricsService
from posthaste.services.mta_sts import MtaStsPolicies, PolicyRefresher
from posthaste.services.pools import PoolQueries, PoolSources, StreamDomainPools
from posthaste.services.ratelimit import RateLimiter
from posthaste.services.retention import RetentionService
from posthaste.services.segments import SegmentService
from posthaste.services.senders import DomainSenders
from posthaste.services.sending import ContentResolver, SenderPolicy, SendingService
from posthaste.services.streams import StreamService
from posthaste.services.suppressions import SuppressionService
from posthaste.services.teams import TeamService
from posthaste.services.template_content import TemplateContent
from posthaste.services.templates import TemplateService
from posthaste.services.tls_reports import TlsReportService
from posthaste.services.topics import TopicService
from posthaste.services.tracking import TrackingService
from posthaste.services.unsubscribe import UnsubscribeService
from posthaste.services.webhooks import WebhookService
from posthaste.storage.database import Database
from posthaste.storage.dialects import Dialect, dialect_for
from posthaste.storage.migrate import upgrade_to_head
from posthaste.workers.kinds import FIRST_KINDS, build_handlers
from posthaste.workers.runner import Worker
from posthaste.workers.webhooks import CLAIM_ROUNDS, DispatchPolicy, WebhookDispatcher


@dataclass
class Services:
    settings: Settings
    db: Database
    transports: TransportRegistry
    teams: TeamService
    api_keys: ApiKeyService
    sending: SendingService
    emails: EmailQueries
    email_changes: EmailChanges
    rate_limiter: RateLimiter
    streams: StreamService
    suppressions: SuppressionService
    delivery: DeliveryService
    attempts: AttemptQueries
    templates: TemplateService
    domains: DomainService
    webhooks: WebhookService
    event_stream: EventStream
    contacts: ContactService
    contact_imports: ContactImportService
    segments: SegmentService
    topics: TopicService
    inbound: InboundService
    received: ReceivedQueries
    broadcasts: BroadcastService
    unsubscribe: UnsubscribeService
    automations: AutomationService
    event_definitions: EventDefinitionService
    automation_steps: StepRunner
    tracking: TrackingService
    retention: RetentionService
    mta_sts: MtaStsPolicies
    mta_sts_refresher: PolicyRefresher
    tls_reports: TlsReportService
    metrics: Metrics
    metrics_service: MetricsService
    destinations: DestinationQueries
    pools: PoolQueries
    workers: list[Worker] = field(default_factory=list)
    dispatchers: list[WebhookDispatcher] = field(default_factory=list)

    def make_worker(self, **options: float | int) -> Worker:
        """A job runner for every kind in ``workers/kinds.py``; ``options`` tune the runner."""
        handlers = build_handlers(self)
        worker = Worker(
            self.db,
            handlers.one_by_one,
            batch_handlers=handlers.batched,
            batch_starters=handlers.starters,
            lane_sizes=handlers.lanes,
            first_kinds=FIRST_KINDS,
            lease_seconds=float(options.pop("lease_seconds", self.settings.job_lease)),
            **options,  # type: ignore[arg-type]
        )
        self.workers.append(worker)
        return worker

    def make_webhook_dispatcher(self, **options: int | float) -> WebhookDispatcher:
        """The worker role's webhook sender (its own loop: see ``workers/webhooks.py``)."""
        settings = self.settings
        client = WebhookClient(
            HostLookup(settings.dns_nameservers),
            timeout=settings.webhook_timeout,
            allow_private=settings.webhook_allow_private,
        )
        # Long enough for every round of an endpoint's claimed deliveries to time out in turn.
        lease = max(settings.job_lease, (CLAIM_ROUNDS + 1) * settings.webhook_timeout)
        policy = DispatchPolicy(
            schedule=settings.webhook_retry_schedule,
            jitter=settings.webhook_jitter,
            lease_ms=int(lease * 1000),
            **options,  # type: ignore[arg-type]
        )
        box = SecretBox(settings.secret_keys, WEBHOOK_SECRET_PURPOSE)
        dispatcher = WebhookDispatcher(self.db, client, box, policy, self.metrics)
        self.dispatchers.append(dispatcher)
        return dispatcher

    async def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for dispatcher in self.dispatchers:
            dispatcher.stop()
            await dispatcher.client.close()
        await self.tracking.close()
        await self.transports.close()
        await self.db.close()


def build_services(
    settings: Settings,
    *,
    content: ContentResolver | None = None,
    senders: SenderPolicy | None = None,
    signing_keys: SigningKeys | None = None,
    transports: TransportRegistry | None = None,
    tls_rules: TlsRules | None = None,
    tracking_rules: TrackingRules | None = None,
    policy_fetcher: PolicyFetcher | None = None,
) -> Services:
    if settings.blob_store != "database":
        raise ConfigError("POSTHASTE_BLOB_STORE: only 'database' is available in this version")
    db = Database(settings.async_database_url, _dialect(settings))
    metrics = Metrics()
    idempotency = IdempotencyService(db)
    transports = transports or build_transports(settings)
    transports.pace_with(DestinationThrottle(db, settings.destinations))
    if settings.pools.any:
        transports.draw_from(PoolSources(db, settings.pools))
    fetcher = policy_fetcher or PolicyFetcher(
        settings.dns_nameservers,
        ca_file=settings.tls_ca_file,
        allow_private=settings.mta_sts_allow_private,
    )
    mta_sts = MtaStsPolicies(db, Resolver(settings.dns_nameservers), metrics=metrics)
    transports.secure_with(mta_sts)
    parsed_templates = ParseCache()
    domains = DomainService(db, settings, Resolver(settings.dns_nameservers), KeyProviders())
    api_keys = ApiKeyService(db)
    template_content = TemplateContent(parsed_templates)
    sender_policy = senders or DomainSenders(db, settings.default_region)
    links = UnsubscribeLinks(settings.secret_keys, settings.public_url)
    sending = SendingService(
        db, content or template_content, sender_policy, idempotency, links, metrics
    )
    unsubscribe = UnsubscribeService(db, links)
    unsubscribe_pages = (links.url_of(""),)  # never tracked
    tracking = TrackingLinks(settings.secret_keys, settings.public_url, untracked=unsubscribe_pages)
    destinations = DestinationQueries(db, settings.destinations)
    pools = PoolQueries(db, settings.pools)
    return Services(
        settings=settings,
        db=db,
        transports=transports,
        teams=TeamService(db, api_keys),
        api_keys=api_keys,
        sending=sending,
        emails=EmailQueries(db, AttachmentLinks(settings.secret_keys, settings.public_url)),
        email_changes=EmailChanges(db),
        rate_limiter=RateLimiter(db),
        streams=StreamService(db, settings.pools),
        suppressions=SuppressionService(db),
        delivery=DeliveryService(
            db,
            transports,
            settings.delivery_retry_schedule,
            verp_signer(settings.secret_keys),
            signing_keys or domains,
            tls_rules or DomainTlsRules(domains),
            tracking,
            tracking_rules or DomainTrackingRules(domains),
            metrics=metrics,
            pool_rules=StreamDomainPools(db) if settings.pools.any else None,
            max_queue_age=settings.max_queue_age,
        ),
        attempts=AttemptQueries(db),
        destinations=destinations,
        pools=pools,
        templates=TemplateService(db, parsed_templates),
        domains=domains,
        webhooks=WebhookService(
            db,
            SecretBox(settings.secret_keys, WEBHOOK_SECRET_PURPOSE),
            HostLookup(settings.dns_nameservers),
            allow_private=settings.webhook_allow_private,
        ),
        event_stream=EventStream(db),
        contacts=ContactService(db),
        contact_imports=ContactImportService(db),
        segments=SegmentService(db),
        topics=TopicService(db),
        inbound=InboundService(
            db,
            verp_signer(settings.secret_keys),
            settings.retention_days,
            unsubscribe,
            # DKIM keys and DMARC records kept for their TTL: a sender's mail asks for the same two.
            MessageAuthenticator(Resolver(settings.dns_nameservers, cached=True)),
            results_host=settings.mx_host,
        ),
        received=ReceivedQueries(
            db,
            AttachmentLinks(
                settings.secret_keys,
                settings.public_url,
                purpose=RECEIVED_LINK_PURPOSE,
                path="received-attachments",
            ),
            AttachmentLinks(
                settings.secret_keys,
                settings.public_url,
                purpose=RAW_LINK_PURPOSE,
                path="received-raw",
            ),
        ),
        broadcasts=BroadcastService(
            db,
            sending,
            template_content,
            sender_policy,
            links,
            chunk_size=settings.broadcast_chunk_size,
        ),
        unsubscribe=unsubscribe,
        automations=AutomationService(db),
        event_definitions=EventDefinitionService(db),
        automation_steps=StepRunner(db, sending),
        tracking=TrackingService(db, tracking),
        retention=RetentionService(db, settings.retention_days),
        mta_sts=mta_sts,
        mta_sts_refresher=PolicyRefresher(
            db, Resolver(settings.dns_nameservers), fetcher, metrics=metrics
        ),
        tls_reports=TlsReportService(
            db,
            Resolver(settings.dns_nameservers),
            fetcher,
            registered_domain(settings.mx_host),
            metrics=metrics,
        ),
        metrics=metrics,
        metrics_service=MetricsService(db, metrics, destinations, pools),
    )


async def migrate(settings: Settings) -> None:
    await upgrade_to_head(settings.async_database_url, _dialect(settings))


def _dialect(settings: Settings) -> Dialect:
    """SQLite or PostgreSQL, chosen here from the URL for everything built on the database;
    what it needs on this machine is made before first use."""
    dialect = dialect_for(settings.database_url)
    dialect.prepare(settings.data_dir)
    return dialect
