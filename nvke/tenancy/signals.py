"""Open websockets close when their access ends, however it ended: a token revoked (API, UI, a member's
removal, `revoked_at` set in the admin), expired by an edit in the admin, or deleted; a user deactivated
or deleted (every stream), or no longer staff (the operators' streams)."""

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from nvke.realtime import close_streams, staff_group, token_group, user_group

from .models import ApiToken


@receiver(post_save, sender=ApiToken)
def close_streams_of_inactive_token(sender, instance: ApiToken, created: bool, **kwargs) -> None:
    if not created and not instance.is_active:
        close_streams(token_group(instance.pk))


@receiver(post_delete, sender=ApiToken)
def close_streams_of_deleted_token(sender, instance: ApiToken, **kwargs) -> None:
    close_streams(token_group(instance.pk))


User = get_user_model()
ACCESS_FIELDS = ("is_active", "is_staff")


@receiver(pre_save, sender=User)
def remember_access(sender, instance, update_fields=None, **kwargs) -> None:
    """The flags as stored, so post_save can tell which were taken away (sign-ins save only
    last_login: no read then)."""
    instance._access_before = None
    if instance.pk is None or (update_fields is not None and not set(ACCESS_FIELDS) & set(update_fields)):
        return
    instance._access_before = User.objects.filter(pk=instance.pk).values(*ACCESS_FIELDS).first()


@receiver(post_save, sender=User)
def close_streams_of_lost_access(sender, instance, created: bool, **kwargs) -> None:
    before = getattr(instance, "_access_before", None)
    if created or before is None:
        return
    if before["is_active"] and not instance.is_active:
        close_streams(user_group(instance.pk))
    elif before["is_staff"] and not instance.is_staff:
        close_streams(staff_group(instance.pk))


@receiver(post_delete, sender=User)
def close_streams_of_deleted_user(sender, instance, **kwargs) -> None:
    close_streams(user_group(instance.pk))
