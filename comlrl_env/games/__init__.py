"""Turn-taking text games from game engines: the engine-independent base (`comlrl_env.games.base`:
`TextGameEnv`) and one adapter per engine (`comlrl_env.games.openspiel`: `OpenSpielEnv`, `OpenSpielBot`;
`comlrl_env.games.textarena`: `TextArenaEnv`, `TextArenaBot`, with its allowlist in `textarena_games`).

Each adapter imports its engine when first used, so `import comlrl_env` needs none of them.
"""
