"""`swegreen serve`: the AgentBeats green agent, its engine local or the AWS pipeline."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from swegreen.cli.common import LOCAL_ENV_KEYS, card_url, scenario_path
from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
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
    front_door = None
    if args.backend == "local" and server_config.environments != "docker":
        # rows graded in instance images run nothing of a participant's here
        from swegreen.sandbox.isolation import Isolation

        Isolation.probe(server_config.isolation)
    if args.backend == "aws":
        from swegreen.aws.front_door_client import FrontDoorSettings

        if not args.api_url:
            raise ConfigError("--backend aws needs --api-url (the stack's ApiUrl output)")
        try:
            front_door = FrontDoorSettings(
                url=args.api_url,
                auth=args.api_auth,
                region=args.api_region,
                api_key=env.get("SWEGREEN_API_KEY"),
                poll_seconds=args.api_poll,
            )
        except ValueError as exc:  # pydantic's ValidationError
            raise ConfigError(f"--api-*: {exc}") from None
        if front_door.auth == "api_key" and not front_door.api_key:
            raise ConfigError("--api-auth api_key needs the key in $SWEGREEN_API_KEY")

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
