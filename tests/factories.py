"""factory-boy factories for the models tests build directly (services create the rest)."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from conversations.models import Conversation


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.django.Password("pw-for-tests")


class StaffFactory(UserFactory):
    is_staff = True
    is_superuser = True


class ConversationFactory(factory.django.DjangoModelFactory):
    """A conversation row; ``conversation_create`` is the service, this is for fixtures only."""

    class Meta:
        model = Conversation

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"conversation {n}")
    workspace = factory.LazyAttribute(lambda c: f"ws-{c.title.replace(' ', '-')}")
