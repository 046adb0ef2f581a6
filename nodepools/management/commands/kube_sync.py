"""`manage.py kube_sync [--shard I/N]`: watch this shard's attached clusters (nodepools/kube_sync.py)
until interrupted."""

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from nodepools import kube_sync


def shard(value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise CommandError(f"--shard takes I/N, e.g. 0/2; got {value!r}") from None
    if not 0 <= i < n:
        raise CommandError(f"--shard {value}: I must be at least 0 and below N")
    return i, n


class Command(BaseCommand):
    help = "List-watch attached clusters and keep NVKE's nodes, pools and cluster conditions current."

    def add_arguments(self, parser):
        parser.add_argument("--shard", default="0/1", help="This process's shard of the clusters, I/N.")
        parser.add_argument("--poll", type=float, default=30.0, help="Seconds between looks for clusters.")
        parser.add_argument("--resync", type=float, default=300.0, help="Seconds between full re-lists.")

    def handle(self, *args, **options):
        index, count = shard(options["shard"])
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"kube_sync: shard {index}/{count}, watching attached clusters")
        kube_sync.run(stop, shard=index, shards=count, poll_s=options["poll"], resync_s=options["resync"])
