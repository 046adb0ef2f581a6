"""A token that stops working closes the streams opened with it, however it stopped: revoked (API, UI,
a member's removal, `revoked_at` set in the admin), expired by an edit in the admin, or deleted."""

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from nvke.realtime import close_streams, token_group

from .models import ApiToken


@receiver(post_save, sender=ApiToken)
def close_streams_of_inactive_token(sender, instance: ApiToken, created: bool, **kwargs) -> None:
    if not created and not instance.is_active:
        close_streams(token_group(instance.pk))


@receiver(post_delete, sender=ApiToken)
def close_streams_of_deleted_token(sender, instance: ApiToken, **kwargs) -> None:
    close_streams(token_group(instance.pk))
