"""`swegreen serve`: the AgentBeats green agent, its engine local or the AWS pipeline."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from swegreen.cli.common import LOCAL_ENV_KEYS, card_url, scenario_path
from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from swegreen.aws.front_door_client import FrontDoorSettings
    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.settings import LocalSettings


def serve_command(
    args: argparse.Namespace, settings: LocalSettings, env: dict[str, str], scrubber: Scrubber
) -> int:
    from a2a.server.agent_execution import AgentExecutor

    from swegreen.agent.server import DeferredExecutor, build_app, green_card, serve
    from swegreen.core.config import config_from_env, load_config, read_scenario

    scenario = scenario_path(args)
    defaults = {
        **(read_scenario(scenario) if scenario else {}),
        **config_from_env(env, allowed_extra=LOCAL_ENV_KEYS),
    }
    # fail at start-up, not per request: a bad config, or a sandbox that cannot run here
    server_config = load_config(scenario, env, env_extra=LOCAL_ENV_KEYS)
    backend = args.backend or env.get("SWEGREEN_BACKEND") or "local"
    if backend not in ("local", "aws"):
        raise ConfigError(f"SWEGREEN_BACKEND={backend!r}: local or aws")
    front_door = None
    if backend == "local" and server_config.environments != "docker":
        # rows graded in instance images run nothing of a participant's here
        from swegreen.sandbox.isolation import Isolation

        Isolation.probe(server_config.isolation)
    if backend == "aws":
        front_door = front_door_settings(args, env)

    def make() -> AgentExecutor:
        """The engine's side: seconds of imports, made while the card already answers."""
        from swegreen.agent.assessment import AgentSettings
        from swegreen.agent.executor import GreenAgentExecutor

        agent = AgentSettings(
            local=settings,
            defaults=defaults,
            host_env=env,
            scrubber=scrubber,
            heartbeat=args.heartbeat,
            llm_mock_response=args.llm_mock_response,
            diagnose=not args.no_diagnoses,
            front_door=front_door,
        )
        return GreenAgentExecutor(agent)

    serve(build_app(DeferredExecutor(make), green_card(card_url(args))), args.host, args.port)
    return 0


def front_door_settings(args: argparse.Namespace, env: dict[str, str]) -> FrontDoorSettings:
    """The ``aws`` backend's API, from flags or, where the flag is not given, from
    ``SWEGREEN_*`` variables (what an Amber manifest sets from its config: a scenario
    names the API there, its key as a secret)."""
    from swegreen.aws.front_door_client import FrontDoorSettings

    url = args.api_url or env.get("SWEGREEN_API_URL")
    if not url:
        raise ConfigError(
            "the aws backend needs the front door's URL (the stack's ApiUrl output): "
            "--api-url or $SWEGREEN_API_URL"
        )
    key = env.get("SWEGREEN_API_KEY") or None
    auth = args.api_auth or env.get("SWEGREEN_API_AUTH") or ("api_key" if key else "iam")
    try:
        front_door = FrontDoorSettings(
            url=url,
            auth=auth,
            region=args.api_region or env.get("SWEGREEN_API_REGION") or None,
            api_key=key,
            poll_seconds=args.api_poll,
            exchange=args.exchange or env.get("SWEGREEN_EXCHANGE") or "green_agent",
        )
    except ValueError as exc:  # pydantic's ValidationError
        raise ConfigError(f"the aws backend's settings (--api-*, $SWEGREEN_API_*): {exc}") from None
    if front_door.auth == "api_key" and not front_door.api_key:
        raise ConfigError("api_key auth needs the key in $SWEGREEN_API_KEY")
    return front_door
