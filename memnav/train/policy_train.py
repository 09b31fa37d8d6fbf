"""`memnav train policy`: DAgger warm start from the oracle, then PPO, on the train houses.

Vectorised embedded-simulator environments (one `Navigator` each: the same encoder, memory and stop rule
the evaluated agent uses) produce the policy's inputs; the policy runs batched over all environments.

Phase 1, DAgger (`--bc-updates`): the executed action is the oracle's with probability beta (annealed from
1 to 0) and the policy's otherwise; the loss is the cross-entropy to the oracle's action on every visited
state (so the policy learns to recover from its own mistakes), plus the goal-reached head.
Phase 2, PPO with GAE: reward = geodesic progress (m) - `step_penalty` per action + `success_bonus` when the
stop rule stops within the success radius; a decaying behaviour-cloning term keeps the warm start. The
recurrent core is trained on whole rollout chunks (hidden state stored at each chunk start).

STOP is decided by the stop controller inside the environment: when its belief says stop, the episode ends
with STOP right after the policy's move, so the policy is rewarded for bringing the robot to where the goal
photo was taken and facing the same way (the belief needs the view to match).

Resumable: model, optimiser, counters and curves live in `<out>.state`; re-running the same command continues
up to `--updates`, and `--max-minutes` ends a chunk cleanly so runs fit a session. A resumed run starts new
episodes with a new DAgger replay and its random streams drawn from the update it resumes at, so it does not
repeat an uninterrupted run step for step. A resume with other settings, another encoder checkpoint, calibration
or set of houses is refused by name. A first Ctrl-C stops the run once the update under way is done, saved there
(a second one stops at once). Saves replace their files atomically; a NaN or infinite loss stops the run before it
is saved. The default `--out` is models/policy_<variant>.pt, not replaced where it exists without a `.state` (a
shipped policy); `--out` may not be the `--checkpoint` or `--calibration` the run reads.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from memnav.core import stop
from memnav.core.checkpoint import file_tag, read_state, torch_bytes
from memnav.core.encoder import Encoder
from memnav.core.files import replace_files
from memnav.core.navigator import MemoryKind, Navigator, NavigatorConfig, StepInput
from memnav.core.policy import MOVES, MemoryPolicy, PolicyConfig, save_policy
from memnav.core.stop import GoalBeliefCalibrator
from memnav.core.types import Action
from memnav.eval.report import figure_png
from memnav.paths import check_output_file, same_file
from memnav.sim.base import SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.train.checks import diverged, output_checkpoint, stop_at_step_end

VARIANTS = {"memnav": MemoryKind.SCENE_GRAPH, "episodic": MemoryKind.EPISODIC, "gru": MemoryKind.NONE}


@dataclass
class PolicyTrainConfig:
    """Training settings.

    Attributes:
        variant: memnav (scene graph + working buffer), episodic, or gru (no memory).
        updates: total updates (a resumed run continues up to this).
        bc_updates: first updates trained by DAgger from the oracle (beta annealed 1 -> 0 over them).
        envs: parallel environments.
        rollout_steps: steps per environment per update (the recurrent chunk length).
        max_episode_steps: step limit of training episodes (shorter than evaluation's 500 keeps data fresh).
        lr: Adam learning rate.
        ppo_epochs: passes over each rollout.
        minibatch_envs: environments per PPO minibatch (whole chunks).
        clip: PPO ratio clip.
        gamma: discount.
        gae_lambda: GAE lambda.
        value_coef: value-loss weight.
        entropy_coef: entropy bonus weight.
        bc_coef_ppo: behaviour-cloning weight at the start of PPO (decays linearly to 0 by the last update).
        goal_coef: goal-reached head loss weight.
        step_penalty: reward per action.
        success_bonus: reward for stopping within the success radius.
        episodes_per_house: episodes an environment runs in one house before moving to another.
        dagger_replay: rollouts kept in the DAgger dataset (aggregated over the last this many updates).
        dagger_steps: gradient steps per DAgger update, each on `minibatch_envs` chunks drawn from the dataset.
        seed: random seed.
    """

    variant: str = "memnav"
    updates: int = 300
    bc_updates: int = 150
    envs: int = 8
    rollout_steps: int = 64
    max_episode_steps: int = 300
    lr: float = 3e-4
    ppo_epochs: int = 3
    minibatch_envs: int = 4
    clip: float = 0.2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    bc_coef_ppo: float = 0.5
    goal_coef: float = 0.2
    step_penalty: float = 0.01
    success_bonus: float = 2.5
    episodes_per_house: int = 8
    dagger_replay: int = 40
    dagger_steps: int = 12
    seed: int = 0

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {self.variant!r}")
        if self.envs % self.minibatch_envs:
            raise ValueError(f"envs ({self.envs}) must be a multiple of minibatch_envs ({self.minibatch_envs})")


@dataclass
class Transition:
    """What one environment returns after a step."""

    inp: StepInput
    reward: float
    done: bool
    oracle: int          # index into MOVES, -1 where the oracle would stop
    at_goal: float       # 1 when within the success radius (goal-head label)
    finished: dict | None  # episode summary when `done`


class TrainEnv:
    """One embedded-simulator ImageNav environment with its own Navigator (no policy inside)."""

    def __init__(self, index: int, episodes_by_house: list[list], encoder: Encoder,
                 calibrator: GoalBeliefCalibrator, nav_cfg: NavigatorConfig, cfg: PolicyTrainConfig) -> None:
        from memnav.eval.agents import OracleAgent
        from memnav.sim.embedded import EmbeddedSimulator
        from memnav.sim.env import ImageNavEnv

        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed * 1000 + index)
        self.houses = episodes_by_house
        self.house = index % len(episodes_by_house)
        self.sim = EmbeddedSimulator(config=SimConfig(max_episode_steps=cfg.max_episode_steps, seed=cfg.seed + index))
        self.env = ImageNavEnv(self.sim)
        self.nav = Navigator(encoder, calibrator, nav_cfg)
        self.oracle = OracleAgent()
        self.episodes_here = 0
        self.stamp_ns = 0
        self.dist = 0.0

    def _oracle_label(self, obs) -> int:
        a = self.oracle.act(obs)
        return -1 if a == Action.STOP else MOVES.index(a)

    def _observe(self, obs) -> StepInput:
        self.stamp_ns += 1_000_000_000
        return self.nav.observe(obs.rgb, obs.depth, obs.pose, self.stamp_ns, obs.collided)

    def reset(self) -> Transition:
        if self.episodes_here >= self.cfg.episodes_per_house:
            self.house = int(self.rng.integers(len(self.houses)))
            self.episodes_here = 0
        self.episodes_here += 1
        pool = self.houses[self.house]
        ep = pool[int(self.rng.integers(len(pool)))]
        obs = self.env.reset(ep)
        goal = self.env.goal_observation
        self.oracle.reset(ep, goal, self.sim)
        self.nav.reset(goal.rgb, goal.depth)
        if self.nav.memory is not None:  # a new episode starts with an empty long-term memory in training
            from memnav.core.memory.scene_graph import SceneGraphMemory
            self.nav.memory.close()
            self.nav.memory = SceneGraphMemory()
        self.dist = self.env.distance_to_goal()
        inp = self._observe(obs)
        return Transition(inp, 0.0, False, self._oracle_label(obs), float(self.dist < 1.0), None)

    def step(self, move: int) -> Transition:
        action = MOVES[move]
        obs = self.env.step(action)
        self.nav.prev_action = int(action)
        inp = self._observe(obs)
        d = self.env.distance_to_goal()
        reward = (self.dist - d) - self.cfg.step_penalty
        self.dist = d
        if not self.env.done and inp.stop.stop:
            self.env.step(Action.STOP)
            if d < self.sim.config.success_distance_m:
                reward += self.cfg.success_bonus
        finished = None
        if self.env.done:
            r = self.env.result()
            finished = {"success": r.success, "spl": r.spl, "steps": r.steps, "stopped": r.status.value}
        return Transition(inp, float(reward), self.env.done, -1 if self.env.done else self._oracle_label(obs),
                          float(d < 1.0), finished)


def _stack(trs: list[Transition]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    step = torch.from_numpy(np.stack([t.inp.step for t in trs]))
    tokens = torch.from_numpy(np.stack([t.inp.tokens for t in trs]))
    mask = torch.from_numpy(np.stack([t.inp.token_mask for t in trs]))
    return step, tokens, mask


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = PolicyTrainConfig()
    parser.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="policy checkpoint to write; the resumable state goes to PATH.state and the "
                             "training curves beside it (.curve.json, .curve.png); default "
                             "models/policy_VARIANT.pt (--variant's), which a new run does not replace when it "
                             "exists without PATH.state (a shipped policy): give --out to replace it")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default=d.variant,
                        help="memory the policy reads: memnav (scene graph + working buffer), episodic, gru (none)")
    parser.add_argument("--updates", type=int, default=d.updates, metavar="N",
                        help="total updates, each one rollout of --rollout-steps actions in every environment "
                             "(a resumed run continues up to N), >= 1")
    parser.add_argument("--bc-updates", type=int, default=d.bc_updates, metavar="N",
                        help="the first N updates imitate the oracle (DAgger); PPO after them")
    parser.add_argument("--envs", type=int, default=d.envs, metavar="N",
                        help="parallel simulator environments, each with its own navigator (memory, stop rule)")
    parser.add_argument("--rollout-steps", type=int, default=d.rollout_steps, metavar="STEPS",
                        help="actions per environment per update (the recurrent chunk length)")
    parser.add_argument("--max-episode-steps", type=int, default=d.max_episode_steps, metavar="STEPS",
                        help="step limit of a training episode, actions")
    parser.add_argument("--lr", type=float, default=d.lr, metavar="LR", help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=d.seed, metavar="N", help="random seed, >= 0")
    parser.add_argument("--checkpoint", type=Path, default=Path("models/encoder.pt"), metavar="PATH",
                        help="encoder checkpoint (memnav train encoder) whose embeddings the policy reads")
    parser.add_argument("--calibration", type=Path, default=Path("models/stop_calibration.json"), metavar="PATH",
                        help="stop belief calibration JSON (memnav train stop)")
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="generated dataset; episodes of its train split are used")
    parser.add_argument("--houses", type=int, default=0, metavar="N",
                        help="use only the first N train houses (0 = all)")
    parser.add_argument("--max-minutes", type=float, default=0.0, metavar="MIN",
                        help="stop this chunk cleanly after this many minutes, wall clock (state saved; re-run "
                             "to resume); default 0 = no limit")
    parser.add_argument("--save-every", type=int, default=10, metavar="N",
                        help="updates between saves of the checkpoint, state and curves (the last update is "
                             "always saved)")
    parser.add_argument("--restart", action="store_true",
                        help="ignore an existing PATH.state and start over (it is replaced at the first save)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def load_calibrator(path: Path) -> GoalBeliefCalibrator:
    """The `--calibration` file (`memnav.core.stop.load_calibrator`); its errors name the option."""
    try:
        return stop.load_calibrator(path)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--calibration: {err}") from err
    except ValueError as err:
        raise ValueError(f"--calibration: {err}") from err


def _check_options(args: argparse.Namespace) -> None:
    """Refuse option values training cannot use, naming the option as typed (before anything is loaded)."""
    for name, value, least, what in (("--updates", args.updates, 1, "total updates"),
                                     ("--bc-updates", args.bc_updates, 0, "DAgger updates; 0 = PPO only"),
                                     ("--envs", args.envs, 1, "parallel environments"),
                                     ("--rollout-steps", args.rollout_steps, 1, "actions per environment per update"),
                                     ("--max-episode-steps", args.max_episode_steps, 1, "actions per episode"),
                                     ("--houses", args.houses, 0, "0 = all"),
                                     ("--save-every", args.save_every, 1, "updates between saves"),
                                     ("--seed", args.seed, 0, "random seed")):
        if value < least:
            raise ValueError(f"{name} must be >= {least} ({what}), got {value}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr:g}")
    if not args.max_minutes >= 0:
        raise ValueError(f"--max-minutes must be >= 0 (0 = no limit), got {args.max_minutes:g}")
    args.out = output_checkpoint(args.out, Path(f"models/policy_{args.variant}.pt"))
    check_output_file(args.out, "--out")
    written = _written_files(args.out)
    for option, path in (("--checkpoint", args.checkpoint), ("--calibration", args.calibration)):
        hit = next((w for w in written if same_file(path, w)), None)
        if hit is not None:
            raise ValueError(f"{option} {path} is also what --out {args.out} writes ({hit.name}): the run would "
                             f"replace the file it reads; give --out another path")


def _written_files(out: Path) -> list[Path]:
    """The files a run with `--out out` writes: the checkpoint, its resumable state and its curves."""
    return [out, out.with_name(out.name + ".state"), out.with_suffix(".curve.json"), out.with_suffix(".curve.png")]


def minibatch_envs(envs: int) -> int:
    """Environments per PPO minibatch: the largest divisor of `envs` up to 4 (4 for the default 8)."""
    return max(d for d in range(1, 5) if envs % d == 0)


# what `run` reads back from `<out>.state`
_STATE_KEYS = ("model", "optimizer", "update", "curve", "train_config")


def _read_state(state_path: Path) -> dict:
    """The resumable state `run` saved in `state_path` (a ValueError naming the file otherwise)."""
    st = read_state(state_path, _STATE_KEYS, "memnav train policy",
                    "it is left as it is: move it away, or pick another --out, to start over")
    if not isinstance(st["train_config"], dict):
        raise ValueError(f"{state_path}: not a resumable state of `memnav train policy` (train_config is not a "
                         "mapping); it is left as it is: move it away, or pick another --out, to start over")
    return st


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from memnav.sim.episodes import load_episodes

    _check_options(args)
    cfg = PolicyTrainConfig(variant=args.variant, updates=args.updates, bc_updates=args.bc_updates, envs=args.envs,
                            rollout_steps=args.rollout_steps, max_episode_steps=args.max_episode_steps, lr=args.lr,
                            seed=args.seed, minibatch_envs=minibatch_envs(args.envs))
    state_path = args.out.with_name(args.out.name + ".state")
    st = _read_state(state_path) if state_path.is_file() and not getattr(args, "restart", False) else None
    if st is not None:
        # `updates` may grow between chunks (train longer); every other setting must match
        diff = {k: (st["train_config"].get(k), v) for k, v in asdict(cfg).items()
                if k != "updates" and st["train_config"].get(k) != v}
        if diff:
            raise ValueError(f"{state_path}: resuming with other settings {diff}; use the same options, or "
                             f"--restart to start over")
    torch.set_num_threads(1)
    try:
        episodes = load_episodes(args.data, "train")
    except (OSError, ValueError) as err:
        raise ValueError(f"--data: {err}") from err
    by_house: dict[str, list] = {}
    for ep in episodes:
        by_house.setdefault(ep.scene_id, []).append(ep)
    houses = [by_house[k] for k in sorted(by_house)]
    if not houses:
        raise ValueError(f"--data {args.data}: no episodes in the train split")
    if args.houses > 0:
        houses = houses[: args.houses]
    encoder = Encoder.from_checkpoint(args.checkpoint)
    calibrator = load_calibrator(args.calibration)
    # what the policy learns from besides its settings; states written before it was recorded are not checked
    inputs = {"encoder": file_tag(args.checkpoint), "calibration": file_tag(args.calibration),
              "houses": [pool[0].scene_id for pool in houses]}
    if st is not None and "inputs" in st:
        changed = {k: (st["inputs"].get(k), v) for k, v in inputs.items() if st["inputs"].get(k) != v}
        if changed:
            what = ", ".join(f"{k} {old} (now {new})" for k, (old, new) in changed.items())
            raise ValueError(f"{state_path}: was started with other inputs: {what}; pass the same --checkpoint, "
                             f"--calibration, --data and --houses to resume, or --restart to start over")
    nav_cfg = NavigatorConfig(memory=VARIANTS[cfg.variant].value, greedy=False)
    pcfg = PolicyConfig(embedding_dim=encoder.embedding_dim, memory_tokens=nav_cfg.memory_tokens)
    torch.manual_seed(cfg.seed)
    model = MemoryPolicy(pcfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    update, curve = 0, []
    saved_update: int | None = None
    if st is not None:
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        update, curve = st["update"], st["curve"]
        saved_update = update
        print(f"resuming from update {update}", file=sys.stderr)
    if update >= cfg.updates:
        print(f"{args.out}: already trained for {update} updates", file=sys.stderr)
        return 0
    rng = np.random.default_rng(cfg.seed + update)
    envs = [TrainEnv(i, houses, encoder, calibrator, nav_cfg, cfg) for i in range(cfg.envs)]
    for e in envs:
        e.rng = np.random.default_rng(cfg.seed * 1000 + update * 31 + envs.index(e))
    cur = [e.reset() for e in envs]
    hidden = model.initial_state(cfg.envs)
    finished: list[dict] = []
    replay: deque = deque(maxlen=cfg.dagger_replay)
    t0 = time.monotonic()
    bar = tqdm(total=cfg.updates, initial=update, desc=f"policy[{cfg.variant}]", unit="upd",
               disable=args.no_progress, file=sys.stderr)
    with stop_at_step_end("update") as ctrl_c_asked, bar:   # tqdm closes its bar on leaving
        while update < cfg.updates:
            bc_phase = update < cfg.bc_updates
            beta = max(0.0, 1.0 - update / max(1, cfg.bc_updates)) if bc_phase else 0.0
            T, N = cfg.rollout_steps, cfg.envs
            h0 = hidden.clone()
            steps, toks, masks, acts, logps, vals, rews, dones, labels, goals = ([] for _ in range(10))
            with torch.no_grad():
                for _ in range(T):
                    s, tk, mk = _stack(cur)
                    logits, value, _, hidden = model(s, tk if pcfg.memory_tokens else None,
                                                     mk if pcfg.memory_tokens else None, hidden)
                    dist = torch.distributions.Categorical(logits=logits)
                    a = dist.sample()
                    oracle = torch.tensor([t.oracle for t in cur])
                    if bc_phase:
                        use_oracle = (torch.from_numpy(rng.random(N) < beta)) & (oracle >= 0)
                        a = torch.where(use_oracle, oracle, a)
                    steps.append(s), toks.append(tk), masks.append(mk), acts.append(a)
                    logps.append(dist.log_prob(a)), vals.append(value)
                    labels.append(oracle), goals.append(torch.tensor([t.at_goal for t in cur]))
                    nxt = [e.step(int(ai)) for e, ai in zip(envs, a)]
                    rews.append(torch.tensor([t.reward for t in nxt]))
                    dones.append(torch.tensor([t.done for t in nxt]))
                    for i, t in enumerate(nxt):
                        if t.done:
                            finished.append(t.finished)
                            nxt[i] = envs[i].reset()
                            hidden[i] = 0.0
                    cur = nxt
                s, tk, mk = _stack(cur)
                _, last_value, _, _ = model(s, tk if pcfg.memory_tokens else None, mk if pcfg.memory_tokens else None,
                                            hidden)
            R, D, V = torch.stack(rews), torch.stack(dones).float(), torch.stack(vals)
            adv = torch.zeros(T, N)
            gae = torch.zeros(N)
            for t in reversed(range(T)):
                nv = last_value if t == T - 1 else V[t + 1]
                delta = R[t] + cfg.gamma * nv * (1 - D[t]) - V[t]
                gae = delta + cfg.gamma * cfg.gae_lambda * (1 - D[t]) * gae
                adv[t] = gae
            ret = adv + V
            batch = {"s": torch.stack(steps), "tk": torch.stack(toks), "mk": torch.stack(masks), "a": torch.stack(acts),
                     "logp": torch.stack(logps), "adv": adv, "ret": ret, "lab": torch.stack(labels),
                     "goal": torch.stack(goals), "done": D}
            frac = (update - cfg.bc_updates) / max(1, cfg.updates - cfg.bc_updates)
            bc_coef = 1.0 if bc_phase else cfg.bc_coef_ppo * max(0.0, 1.0 - frac)
            try:
                if bc_phase:
                    replay.append((batch, h0))
                    stats = _dagger(model, opt, replay, cfg, pcfg, rng)
                else:
                    replay.clear()
                    stats = _optimise(model, opt, batch, h0, cfg, pcfg, bc_coef)
            except FloatingPointError as err:   # `_step`: a NaN or infinite loss, before the step is taken
                kept = f"as saved at update {saved_update}" if saved_update is not None else "as they were (none saved)"
                raise diverged(err.args[0], f"update {update + 1} of {cfg.updates} "
                                            f"({'DAgger' if bc_phase else 'PPO'})",
                               f"{args.out} and {state_path} are left {kept}; start over with --restart and a lower "
                               f"--lr (now {cfg.lr:g})") from err
            update += 1
            recent = finished[-50:]
            row = {"update": update, "phase": "dagger" if bc_phase else "ppo", "beta": beta, "bc_coef": bc_coef,
                   "episodes": len(finished), "reward_per_step": float(R.mean()),
                   "success": float(np.mean([f["success"] for f in recent])) if recent else math.nan,
                   "spl": float(np.mean([f["spl"] for f in recent])) if recent else math.nan, **stats}
            curve.append(row)
            bar.update(1)
            bar.set_postfix(phase=row["phase"], succ=f"{row['success']:.2f}", bc=f"{stats['bc_loss']:.2f}")
            out_of_time = args.max_minutes > 0 and (time.monotonic() - t0) / 60 >= args.max_minutes
            interrupted = ctrl_c_asked() and update < cfg.updates   # the last update ends the run as usual
            if update % args.save_every == 0 or update >= cfg.updates or out_of_time or interrupted:
                _save(model, opt, cfg, update, curve, inputs, state_path, args)
                saved_update = update
            if interrupted:
                break
            if out_of_time:
                print(f"stopped after {args.max_minutes} min at update {update}/{cfg.updates}; re-run to resume",
                      file=sys.stderr)
                break
    if interrupted:
        print(f"interrupted (Ctrl-C) at update {update}/{cfg.updates}: {args.out} and {state_path.name} saved "
              f"there; re-run the same command to resume", file=sys.stderr)
        return 130
    return 0


def _unroll(model: MemoryPolicy, b: dict, h: torch.Tensor, chunk: torch.Tensor, pcfg: PolicyConfig
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Re-run the recurrent policy over the stored chunk of environments `chunk` from hidden state `h`."""
    logits_l, values_l, goal_l = [], [], []
    for t in range(b["a"].shape[0]):
        tk = b["tk"][t, chunk] if pcfg.memory_tokens else None
        mk = b["mk"][t, chunk] if pcfg.memory_tokens else None
        logits, value, goal_logit, h = model(b["s"][t, chunk], tk, mk, h)
        logits_l.append(logits), values_l.append(value), goal_l.append(goal_logit)
        h = h * (1 - b["done"][t, chunk]).unsqueeze(1)
    return torch.stack(logits_l), torch.stack(values_l), torch.stack(goal_l)


def _imitation_losses(logits: torch.Tensor, goal_logit: torch.Tensor, b: dict, chunk: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    lab = b["lab"][:, chunk]
    valid = lab >= 0
    bc = nn.functional.cross_entropy(logits[valid], lab[valid]) if valid.any() else torch.zeros(())
    goal_loss = nn.functional.binary_cross_entropy_with_logits(goal_logit, b["goal"][:, chunk])
    return bc, goal_loss


def _step(model: MemoryPolicy, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One clipped gradient step on `loss` (FloatingPointError(loss) where it is NaN or infinite, before the step)."""
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(value)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()


def _dagger(model: MemoryPolicy, opt: torch.optim.Optimizer, replay: deque, cfg: PolicyTrainConfig,
            pcfg: PolicyConfig, rng: np.random.Generator) -> dict:
    """Supervised steps on chunks drawn from the aggregated DAgger dataset (oracle labels on visited states)."""
    bc_sum = goal_sum = 0.0
    for _ in range(cfg.dagger_steps):
        b, h0 = replay[int(rng.integers(len(replay)))]
        chunk = torch.from_numpy(rng.choice(b["a"].shape[1], cfg.minibatch_envs, replace=False))
        logits, _, goal_logit = _unroll(model, b, h0[chunk], chunk, pcfg)
        bc, goal_loss = _imitation_losses(logits, goal_logit, b, chunk)
        _step(model, opt, bc + cfg.goal_coef * goal_loss)
        bc_sum += float(bc.detach())
        goal_sum += float(goal_loss.detach())
    n = max(1, cfg.dagger_steps)
    return {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "bc_loss": bc_sum / n, "goal_loss": goal_sum / n}


def _optimise(model: MemoryPolicy, opt: torch.optim.Optimizer, b: dict, h0: torch.Tensor, cfg: PolicyTrainConfig,
              pcfg: PolicyConfig, bc_coef: float) -> dict:
    """PPO epochs over one rollout (whole chunks per minibatch), plus the decaying imitation term."""
    N = b["a"].shape[1]
    adv = b["adv"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "bc_loss": 0.0, "goal_loss": 0.0}
    count = 0
    for _ in range(cfg.ppo_epochs):
        for chunk in torch.randperm(N).split(cfg.minibatch_envs):
            logits, values, goal_logit = _unroll(model, b, h0[chunk], chunk, pcfg)
            dist = torch.distributions.Categorical(logits=logits)
            bc, goal_loss = _imitation_losses(logits, goal_logit, b, chunk)
            ratio = torch.exp(dist.log_prob(b["a"][:, chunk]) - b["logp"][:, chunk])
            a_ = adv[:, chunk]
            pl = -torch.min(ratio * a_, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a_).mean()
            vl = (values - b["ret"][:, chunk]).pow(2).mean()
            ent = dist.entropy().mean()
            _step(model, opt, pl + cfg.value_coef * vl - cfg.entropy_coef * ent + bc_coef * bc
                  + cfg.goal_coef * goal_loss)
            for k, v in (("policy_loss", pl), ("value_loss", vl), ("entropy", ent), ("bc_loss", bc),
                         ("goal_loss", goal_loss)):
                totals[k] += float(v.detach())
            count += 1
    return {k: v / max(1, count) for k, v in totals.items()}


def _save(model: MemoryPolicy, opt: torch.optim.Optimizer, cfg: PolicyTrainConfig, update: int, curve: list,
          inputs: dict, state_path: Path, args: argparse.Namespace) -> None:
    """Write the checkpoint (refused with NaN weights), then the state and the curves together, each file replaced
    atomically."""
    out = args.out
    save_policy(model, out, extra={"variant": cfg.variant, "memory": VARIANTS[cfg.variant].value,
                                   "update": update, "train_config": asdict(cfg),
                                   "encoder_checkpoint": str(args.checkpoint)})
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "update": update, "curve": curve,
             "train_config": asdict(cfg), "inputs": inputs}
    replace_files({state_path: torch_bytes(state),
                   out.with_suffix(".curve.json"): (json.dumps(curve, indent=1) + "\n").encode(),
                   out.with_suffix(".curve.png"): _plot(curve, cfg.variant)}, sync=True)


def _plot(curve: list[dict], variant: str) -> bytes:
    """The training curves as PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["update"] for r in curve]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    try:
        axes[0].plot(x, [r["success"] for r in curve], label="success (last 50 eps)")
        axes[0].plot(x, [r["spl"] for r in curve], label="SPL")
        axes[0].set_ylim(0, 1)
        axes[1].plot(x, [r["bc_loss"] for r in curve], label="BC cross-entropy")
        axes[1].plot(x, [r["goal_loss"] for r in curve], label="goal-head BCE")
        axes[2].plot(x, [r["reward_per_step"] for r in curve], label="reward / step")
        for ax in axes:
            ax.set_xlabel("update")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        fig.suptitle(f"memnav train policy --variant {variant}")
        fig.tight_layout()
        return figure_png(fig, dpi=90)
    finally:
        plt.close(fig)
