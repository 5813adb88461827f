"""LeRobot's ACT and Diffusion Policy as they run in training, for the checks.

Written from the architecture facts in ../shared/reference/lerobot-policies.md (LeRobot itself,
einops and diffusers are not Debian packages here): module names and parameter shapes follow
the policies' state_dict, __init__ registers submodules in LeRobot's order (so parameters(), and
the optimizer, see them in the same order), and forward runs the same tensor ops in the same
order, since that is what decides memory. einops rearranges are written as the permute and
reshape they perform; diffusers' DDPM add_noise as the arithmetic it does.

    policy, batch_fn, optimizer_fn = build_act(batch=2, cameras=[(640, 480)])
    loss = policy(batch_fn())
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.ops.misc import FrozenBatchNorm2d

ACT_DEFAULTS = dict(cameras="640x480", state_dim=14, action_dim=14, env_state_dim=0,
                    chunk_size=100, dim_model=512, n_heads=8, dim_feedforward=3200,
                    n_encoder_layers=4, n_decoder_layers=1, use_vae=True, latent_dim=32,
                    n_vae_encoder_layers=4, vision_backbone="resnet18", dropout=0.1,
                    feedforward_activation="relu", pre_norm=False, kl_weight=10.0)

DIFFUSION_PRESETS = {
    "v0.6": dict(horizon=64, crop="none", use_group_norm=False,
                 use_separate_rgb_encoder_per_camera=True),
    "classic": dict(horizon=16, crop="84x84", use_group_norm=True,
                    use_separate_rgb_encoder_per_camera=False),
}
DIFFUSION_DEFAULTS = dict(cameras="96x96", state_dim=2, action_dim=2, env_state_dim=0,
                          n_obs_steps=2, down_dims="512,1024,2048", kernel_size=5, n_groups=8,
                          diffusion_step_embed_dim=128, vision_backbone="resnet18")


def parse_cameras(text):
    """"640x360,640x480" -> [(640, 360), (640, 480)] as (width, height)."""
    if text == "none":
        return []
    return [tuple(int(v) for v in c.split("x")) for c in text.split(",")]


def typed(defaults, sets):
    out = dict(defaults)
    for k, v in sets.items():
        if k not in out:
            out[k] = v
        elif isinstance(out[k], bool):
            out[k] = v in (True, "true", "1", "yes")
        elif isinstance(out[k], (int, float)):
            out[k] = type(out[k])(v)
        else:
            out[k] = v
    return out


# ---- ACT -----------------------------------------------------------------------------------

def sinusoid_table(positions, dim):
    angle = np.array([[p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
                      for p in range(positions)])
    angle[:, 0::2] = np.sin(angle[:, 0::2])
    angle[:, 1::2] = np.cos(angle[:, 1::2])
    return torch.from_numpy(angle).float()


class PositionTable2d(nn.Module):
    """DETR-style fixed 2-D sinusoidal table for a (B, C, H, W) map: (1, dim * 2, H, W)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        ones = torch.ones_like(x[0, :1])
        ys = ones.cumsum(1, dtype=torch.float32)
        xs = ones.cumsum(2, dtype=torch.float32)
        ys = ys / (ys[:, -1:, :] + 1e-6) * (2 * math.pi)
        xs = xs / (xs[:, :, -1:] + 1e-6) * (2 * math.pi)
        freq = 10000 ** (2 * (torch.arange(self.dim, dtype=torch.float32) // 2) / self.dim)
        xs = xs.unsqueeze(-1) / freq
        ys = ys.unsqueeze(-1) / freq
        px = torch.stack((xs[..., 0::2].sin(), xs[..., 1::2].cos()), dim=-1).flatten(3)
        py = torch.stack((ys[..., 0::2].sin(), ys[..., 1::2].cos()), dim=-1).flatten(3)
        return torch.cat((py, px), dim=3).permute(0, 3, 1, 2)


def residual(layer, x, norm, dropout, f):
    """x + dropout(f(x)) with the LayerNorm after the add (post-norm) or on f's input
    (pre-norm), in the op order of ACT's encoder and decoder layers."""
    y = f(norm(x) if layer.pre_norm else x)
    x = x + dropout(y)
    return x if layer.pre_norm else norm(x)


class ActEncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim_model"]
        self.self_attn = nn.MultiheadAttention(d, c["n_heads"], dropout=c["dropout"])
        self.linear1 = nn.Linear(d, c["dim_feedforward"])
        self.dropout = nn.Dropout(c["dropout"])
        self.linear2 = nn.Linear(c["dim_feedforward"], d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.dropout1 = nn.Dropout(c["dropout"])
        self.dropout2 = nn.Dropout(c["dropout"])
        self.act = F.gelu if c["feedforward_activation"] == "gelu" else F.relu
        self.pre_norm = c["pre_norm"]

    def forward(self, x, pos, key_padding_mask=None):
        def attend(y):
            qk = y + pos  # q = k = x + pos, one tensor
            return self.self_attn(qk, qk, value=y, key_padding_mask=key_padding_mask)[0]

        x = residual(self, x, self.norm1, self.dropout1, attend)
        return residual(self, x, self.norm2, self.dropout2,
                        lambda y: self.linear2(self.dropout(self.act(self.linear1(y)))))


class ActEncoder(nn.Module):
    def __init__(self, c, layers):
        super().__init__()
        self.layers = nn.ModuleList([ActEncoderLayer(c) for _ in range(layers)])
        self.norm = nn.LayerNorm(c["dim_model"]) if c["pre_norm"] else nn.Identity()

    def forward(self, x, pos, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, pos, key_padding_mask)
        return self.norm(x)


class ActDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim_model"]
        self.self_attn = nn.MultiheadAttention(d, c["n_heads"], dropout=c["dropout"])
        self.multihead_attn = nn.MultiheadAttention(d, c["n_heads"], dropout=c["dropout"])
        self.linear1 = nn.Linear(d, c["dim_feedforward"])
        self.dropout = nn.Dropout(c["dropout"])
        self.linear2 = nn.Linear(c["dim_feedforward"], d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.norm3 = nn.LayerNorm(d)
        self.dropout1 = nn.Dropout(c["dropout"])
        self.dropout2 = nn.Dropout(c["dropout"])
        self.dropout3 = nn.Dropout(c["dropout"])
        self.act = F.gelu if c["feedforward_activation"] == "gelu" else F.relu
        self.pre_norm = c["pre_norm"]

    def forward(self, x, memory, query_pos, memory_pos):
        def attend(y):
            qk = y + query_pos
            return self.self_attn(qk, qk, value=y)[0]

        x = residual(self, x, self.norm1, self.dropout1, attend)
        x = residual(self, x, self.norm2, self.dropout2,
                     lambda y: self.multihead_attn(query=y + query_pos, key=memory + memory_pos,
                                                   value=memory)[0])
        return residual(self, x, self.norm3, self.dropout3,
                        lambda y: self.linear2(self.dropout(self.act(self.linear1(y)))))


class ActDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList([ActDecoderLayer(c) for _ in range(c["n_decoder_layers"])])
        self.norm = nn.LayerNorm(c["dim_model"])

    def forward(self, x, memory, query_pos, memory_pos):
        for layer in self.layers:
            x = layer(x, memory, query_pos, memory_pos)
        return self.norm(x)


class ActModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, state, env = c["dim_model"], c["state_dim"], c["env_state_dim"]
        if c["use_vae"]:
            self.vae_encoder = ActEncoder(c, c["n_vae_encoder_layers"])
            self.vae_encoder_cls_embed = nn.Embedding(1, d)
            if state:
                self.vae_encoder_robot_state_input_proj = nn.Linear(state, d)
            self.vae_encoder_action_input_proj = nn.Linear(c["action_dim"], d)
            self.vae_encoder_latent_output_proj = nn.Linear(d, 2 * c["latent_dim"])
            tokens = 1 + c["chunk_size"] + (1 if state else 0)
            self.register_buffer("vae_encoder_pos_enc", sinusoid_table(tokens, d).unsqueeze(0))
        self.cameras = parse_cameras(c["cameras"])
        if self.cameras:
            trunk = getattr(torchvision.models, c["vision_backbone"])(norm_layer=FrozenBatchNorm2d)
            self.backbone = IntermediateLayerGetter(trunk, return_layers={"layer4": "feature_map"})
        self.encoder = ActEncoder(c, c["n_encoder_layers"])
        self.decoder = ActDecoder(c)
        if state:
            self.encoder_robot_state_input_proj = nn.Linear(state, d)
        if env:
            self.encoder_env_state_input_proj = nn.Linear(env, d)
        self.encoder_latent_input_proj = nn.Linear(c["latent_dim"], d)
        if self.cameras:
            self.encoder_img_feat_input_proj = nn.Conv2d(trunk.fc.in_features, d, kernel_size=1)
        self.encoder_1d_feature_pos_embed = nn.Embedding(1 + (1 if state else 0) + (1 if env else 0), d)
        if self.cameras:
            self.encoder_cam_feat_pos_embed = PositionTable2d(d // 2)
        self.decoder_pos_embed = nn.Embedding(c["chunk_size"], d)
        self.action_head = nn.Linear(d, c["action_dim"])

    def forward(self, batch):
        c = self.c
        actions = batch["action"]
        b = actions.shape[0]
        state = batch.get("observation.state")
        mu = log_sigma_x2 = None
        if c["use_vae"]:
            cls = self.vae_encoder_cls_embed.weight.reshape(-1).unsqueeze(0).expand(b, -1).reshape(b, 1, -1)
            tokens = [cls]
            if state is not None:
                tokens.append(self.vae_encoder_robot_state_input_proj(state).unsqueeze(1))
            tokens.append(self.vae_encoder_action_input_proj(actions))
            vae_in = torch.cat(tokens, axis=1)
            pos = self.vae_encoder_pos_enc.clone().detach()
            # torch.full(..., False) infers bool; spelt out, as that inference is skipped
            # under the measuring dispatch mode.
            never_pad = torch.full((b, 2 if state is not None else 1), False, dtype=torch.bool)
            key_padding_mask = torch.cat([never_pad, batch["action_is_pad"]], axis=1)
            cls_out = self.vae_encoder(vae_in.permute(1, 0, 2), pos.permute(1, 0, 2),
                                       key_padding_mask=key_padding_mask)[0]
            params = self.vae_encoder_latent_output_proj(cls_out)
            mu = params[:, :c["latent_dim"]]
            log_sigma_x2 = params[:, c["latent_dim"]:]
            latent = mu + log_sigma_x2.div(2).exp() * torch.randn_like(mu)
        else:
            latent = torch.zeros([b, c["latent_dim"]], dtype=torch.float32)
        tokens = [self.encoder_latent_input_proj(latent)]
        positions = list(self.encoder_1d_feature_pos_embed.weight.unsqueeze(1))
        if state is not None:
            tokens.append(self.encoder_robot_state_input_proj(state))
        if c["env_state_dim"]:
            tokens.append(self.encoder_env_state_input_proj(batch["observation.environment_state"]))
        for image in batch["observation.images"]:
            features = self.backbone(image)["feature_map"]
            pos = self.encoder_cam_feat_pos_embed(features).to(dtype=features.dtype)
            features = self.encoder_img_feat_input_proj(features)
            # "b c h w -> (h w) b c"
            features = features.permute(2, 3, 0, 1).reshape(-1, features.shape[0], features.shape[1])
            pos = pos.permute(2, 3, 0, 1).reshape(-1, pos.shape[0], pos.shape[1])
            tokens.extend(list(features))
            positions.extend(list(pos))
        tokens = torch.stack(tokens, axis=0)
        positions = torch.stack(positions, axis=0)
        memory = self.encoder(tokens, positions)
        queries = torch.zeros((c["chunk_size"], b, c["dim_model"]), dtype=positions.dtype)
        out = self.decoder(queries, memory, self.decoder_pos_embed.weight.unsqueeze(1), positions)
        return self.action_head(out.transpose(0, 1)), (mu, log_sigma_x2)


class ActPolicy(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = ActModel(c)

    def forward(self, batch):
        batch = dict(batch)
        batch["observation.images"] = [batch[k] for k in sorted(batch) if k.startswith("observation.images.")]
        predicted, (mu, log_sigma_x2) = self.model(batch)
        # Masked L1: the sum over non-padded steps divided by their count.
        abs_err = F.l1_loss(batch["action"], predicted, reduction="none")
        valid = ~batch["action_is_pad"].unsqueeze(-1)
        count = valid.sum() * abs_err.shape[-1]
        loss = (abs_err * valid).sum() / count.clamp_min(1)
        if self.c["use_vae"]:
            kld = (-0.5 * (1 + log_sigma_x2 - mu.pow(2) - log_sigma_x2.exp())).sum(-1).mean()
            loss = loss + kld * self.c["kl_weight"]
        return loss

    def optimizer_groups(self):
        """LeRobot's get_optim_params: the non-backbone parameters, then the backbone's."""
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        return [{"params": [p for n, p in named if not n.startswith("model.backbone")]},
                {"params": [p for n, p in named if n.startswith("model.backbone")], "lr": 1e-5}]


def act_batch(c, batch):
    out = {}
    for i, (w, h) in enumerate(parse_cameras(c["cameras"])):
        out[f"observation.images.cam{i}"] = torch.randn(batch, 3, h, w)
    if c["state_dim"]:
        out["observation.state"] = torch.randn(batch, c["state_dim"])
    if c["env_state_dim"]:
        out["observation.environment_state"] = torch.randn(batch, c["env_state_dim"])
    out["action"] = torch.randn(batch, c["chunk_size"], c["action_dim"])
    pad = torch.zeros(batch, c["chunk_size"], dtype=torch.bool)
    pad[:, c["chunk_size"] * 3 // 4:] = True
    out["action_is_pad"] = pad
    return out


# ---- Diffusion Policy ----------------------------------------------------------------------

class SpatialSoftmax(nn.Module):
    def __init__(self, channels, h, w, keypoints=32):
        super().__init__()
        self.nets = nn.Conv2d(channels, keypoints, kernel_size=1)
        self.h, self.w, self.keypoints = h, w, keypoints
        gx, gy = np.meshgrid(np.linspace(-1.0, 1.0, w), np.linspace(-1.0, 1.0, h))
        grid = np.stack([gx.reshape(-1), gy.reshape(-1)], axis=1)
        self.register_buffer("pos_grid", torch.from_numpy(grid).float())

    def forward(self, x):
        x = self.nets(x).reshape(-1, self.h * self.w)
        return (F.softmax(x, dim=-1) @ self.pos_grid).view(-1, self.keypoints, 2)


class RgbEncoder(nn.Module):
    def __init__(self, c, image_hw):
        super().__init__()
        self.crop = c["crop"]
        trunk = getattr(torchvision.models, c["vision_backbone"])()
        self.backbone = nn.Sequential(*list(trunk.children())[:-2])
        if c["use_group_norm"]:
            replace_batch_norms(self.backbone)
        h, w = self.crop[::-1] if self.crop else image_hw
        with torch.no_grad():
            shape = self.backbone(torch.zeros(1, 3, h, w)).shape
        self.pool = SpatialSoftmax(shape[1], shape[2], shape[3])
        self.out = nn.Linear(64, 64)
        self.relu = nn.ReLU()

    def forward(self, x):
        if self.crop:
            w, h = self.crop
            top, left = 0, 0  # RandomCrop: the offset does not change memory
            x = x[..., top:top + h, left:left + w]
        x = torch.flatten(self.pool(self.backbone(x)), start_dim=1)
        return self.relu(self.out(x))


def replace_batch_norms(module):
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, nn.GroupNorm(child.num_features // 16, child.num_features))
        else:
            replace_batch_norms(child)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, t):
        half = self.dim // 2
        scale = math.log(10000) / (half - 1)
        freq = torch.exp(torch.arange(half) * -scale)
        angle = t.unsqueeze(-1) * freq.unsqueeze(0)
        return torch.cat((angle.sin(), angle.cos()), dim=-1)


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, kernel, groups):
        super().__init__()
        self.block = nn.Sequential(nn.Conv1d(cin, cout, kernel, padding=kernel // 2),
                                   nn.GroupNorm(groups, cout), nn.Mish())

    def forward(self, x):
        return self.block(x)


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, cond, kernel, groups):
        super().__init__()
        self.cout = cout
        self.conv1 = ConvBlock(cin, cout, kernel, groups)
        self.cond_encoder = nn.Sequential(nn.Mish(), nn.Linear(cond, 2 * cout))
        self.conv2 = ConvBlock(cout, cout, kernel, groups)
        self.residual_conv = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, cond):
        out = self.conv1(x)
        film = self.cond_encoder(cond).unsqueeze(-1)
        out = film[:, :self.cout] * out + film[:, self.cout:]
        out = self.conv2(out)
        return out + self.residual_conv(x)


class Unet1d(nn.Module):
    def __init__(self, c, global_cond):
        super().__init__()
        e = c["diffusion_step_embed_dim"]
        self.diffusion_step_encoder = nn.Sequential(TimestepEmbedding(e), nn.Linear(e, 4 * e),
                                                    nn.Mish(), nn.Linear(4 * e, e))
        cond = e + global_cond
        dims = c["down_dims"]
        pairs = [(c["action_dim"], dims[0])] + list(zip(dims[:-1], dims[1:]))
        k, g = c["kernel_size"], c["n_groups"]
        self.down_modules = nn.ModuleList()
        for i, (cin, cout) in enumerate(pairs):
            last = i == len(pairs) - 1
            self.down_modules.append(nn.ModuleList([
                ResidualBlock(cin, cout, cond, k, g), ResidualBlock(cout, cout, cond, k, g),
                nn.Identity() if last else nn.Conv1d(cout, cout, 3, 2, 1)]))
        self.mid_modules = nn.ModuleList([ResidualBlock(dims[-1], dims[-1], cond, k, g)
                                          for _ in range(2)])
        self.up_modules = nn.ModuleList()
        for cout, cin in reversed(pairs[1:]):
            self.up_modules.append(nn.ModuleList([
                ResidualBlock(2 * cin, cout, cond, k, g), ResidualBlock(cout, cout, cond, k, g),
                nn.ConvTranspose1d(cout, cout, 4, 2, 1)]))
        self.final_conv = nn.Sequential(ConvBlock(dims[0], dims[0], k, g),
                                        nn.Conv1d(dims[0], c["action_dim"], 1))

    def forward(self, x, t, global_cond):
        x = x.permute(0, 2, 1)
        cond = torch.cat([self.diffusion_step_encoder(t), global_cond], axis=-1)
        skips = []
        for block1, block2, down in self.down_modules:
            x = block2(block1(x, cond), cond)
            skips.append(x)
            x = down(x)
        for block in self.mid_modules:
            x = block(x, cond)
        for block1, block2, up in self.up_modules:
            x = torch.cat((x, skips.pop()), dim=1)
            x = up(block2(block1(x, cond), cond))
        return self.final_conv(x).permute(0, 2, 1)


def squaredcos_alphas_cumprod(steps=100, max_beta=0.999):
    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = [min(1 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), max_beta) for i in range(steps)]
    return torch.cumprod(1.0 - torch.tensor(betas, dtype=torch.float32), dim=0)


class DiffusionModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        cams = parse_cameras(c["cameras"])
        cond = c["state_dim"] + c["env_state_dim"]
        if cams:
            hw = (cams[0][1], cams[0][0])
            if c["use_separate_rgb_encoder_per_camera"]:
                self.rgb_encoder = nn.ModuleList([RgbEncoder(c, hw) for _ in cams])
            else:
                self.rgb_encoder = RgbEncoder(c, hw)
            cond += 64 * len(cams)
        self.unet = Unet1d(c, cond * c["n_obs_steps"])
        self.alphas_cumprod = squaredcos_alphas_cumprod()

    def global_conditioning(self, batch):
        b, s = batch["observation.state"].shape[:2]
        feats = [batch["observation.state"]]
        if "observation.images" in batch:
            images = batch["observation.images"]
            n = images.shape[2]
            if self.c["use_separate_rgb_encoder_per_camera"]:
                # "b s n ... -> n (b s) ...", then "(n b s) ... -> b s (n ...)"
                per_camera = images.permute(2, 0, 1, 3, 4, 5).reshape(n, b * s, *images.shape[3:])
                f = torch.cat([enc(x) for enc, x in zip(self.rgb_encoder, per_camera)])
                f = f.reshape(n, b, s, -1).permute(1, 2, 0, 3).reshape(b, s, -1)
            else:
                f = self.rgb_encoder(images.reshape(b * s * n, *images.shape[3:]))
                f = f.reshape(b, s, -1)
            feats.append(f)
        if self.c["env_state_dim"]:
            feats.append(batch["observation.environment_state"])
        return torch.cat(feats, dim=-1).flatten(start_dim=1)

    def compute_loss(self, batch):
        cond = self.global_conditioning(batch)
        trajectory = batch["action"]
        eps = torch.randn(trajectory.shape)
        t = torch.randint(low=0, high=100, size=(trajectory.shape[0],)).long()
        # DDPMScheduler.add_noise
        alphas = self.alphas_cumprod.to(dtype=trajectory.dtype)
        keep = alphas[t] ** 0.5
        keep = keep.flatten()
        while len(keep.shape) < len(trajectory.shape):
            keep = keep.unsqueeze(-1)
        noise = (1 - alphas[t]) ** 0.5
        noise = noise.flatten()
        while len(noise.shape) < len(trajectory.shape):
            noise = noise.unsqueeze(-1)
        noisy = keep * trajectory + noise * eps
        pred = self.unet(noisy, t, cond)
        return F.mse_loss(pred, eps, reduction="none").mean()


class DiffusionPolicy(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.diffusion = DiffusionModel(c)

    def forward(self, batch):
        batch = dict(batch)
        keys = sorted(k for k in batch if k.startswith("observation.images."))
        if keys:
            batch["observation.images"] = torch.stack([batch[k] for k in keys], dim=-4)
        return self.diffusion.compute_loss(batch)

    def optimizer_groups(self):
        return [{"params": [p for p in self.diffusion.parameters() if p.requires_grad]}]


def diffusion_config(sets):
    sets = dict(sets)
    preset = DIFFUSION_PRESETS[sets.pop("preset", "v0.6")]
    c = typed(dict(DIFFUSION_DEFAULTS, **preset), sets)
    c["down_dims"] = [int(v) for v in str(c["down_dims"]).split(",")]
    c["crop"] = None if c["crop"] == "none" else parse_cameras(c["crop"])[0]
    for k in ("use_group_norm", "use_separate_rgb_encoder_per_camera"):
        c[k] = c[k] in (True, "true")
    return c


def diffusion_batch(c, batch):
    out = {}
    s = c["n_obs_steps"]
    for i, (w, h) in enumerate(parse_cameras(c["cameras"])):
        out[f"observation.images.cam{i}"] = torch.randn(batch, s, 3, h, w)
    out["observation.state"] = torch.randn(batch, s, c["state_dim"])
    if c["env_state_dim"]:
        out["observation.environment_state"] = torch.randn(batch, s, c["env_state_dim"])
    out["action"] = torch.randn(batch, c["horizon"], c["action_dim"])
    out["action_is_pad"] = torch.zeros(batch, c["horizon"], dtype=torch.bool)
    return out


# ---- LeRobot training presets --------------------------------------------------------------

def preset_optimizer(name, groups):
    """ACT: AdamW lr 1e-5, weight_decay 1e-4. Diffusion: Adam lr 1e-4, betas (0.95, 0.999),
    weight_decay 1e-6."""
    if name == "act":
        return torch.optim.AdamW(groups, lr=1e-5, weight_decay=1e-4)
    return torch.optim.Adam(groups, lr=1e-4, betas=(0.95, 0.999), eps=1e-8, weight_decay=1e-6)


def build(name, batch=1, sets=None):
    """(policy, make_batch) for "act" or "diffusion" with trainfit's --set keys."""
    torch.manual_seed(0)
    if name == "act":
        c = typed(ACT_DEFAULTS, sets or {})
        policy = ActPolicy(c)
        make_batch = lambda: act_batch(c, batch)  # noqa: E731
    elif name == "diffusion":
        c = diffusion_config(sets or {})
        policy = DiffusionPolicy(c)
        make_batch = lambda: diffusion_batch(c, batch)  # noqa: E731
    else:
        raise KeyError(name)
    policy.train()
    return policy, make_batch
