"""Pictures of the leg model: offscreen frames (`rgb_array`), a window (`human`), mp4 videos.

MuJoCo picks its OpenGL backend from MUJOCO_GL when `mujoco` is first imported, and without it
takes GLFW, which needs a display. `select_backend()` keeps an explicit MUJOCO_GL and a display;
on a machine with neither it switches MuJoCo's offscreen context to EGL (Mesa's software
renderer from Debian's libegl1 + libgl1-mesa-dri works without a GPU) or, failing that, OSMesa
(libosmesa6). `scripts/setup.sh --render` installs those Debian packages.

Videos are written with the ffmpeg that the imageio-ffmpeg wheel ships (no system ffmpeg needed;
Gymnasium's RecordVideo, through moviepy, uses the same binary).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

RENDER_MODES = ('human', 'rgb_array')
#: frames per second of `human` rendering and of the videos (one frame every 4 control periods)
RENDER_FPS = 30
WIDTH, HEIGHT = 640, 480  # MuJoCo's default offscreen buffer
OFFSCREEN_BACKENDS = ('egl', 'osmesa')
INSTALL_HINT = (
    'install an offscreen OpenGL: scripts/setup.sh --render (Debian: libegl1 libgl1-mesa-dri '
    'libosmesa6), or set MUJOCO_GL=egl / MUJOCO_GL=osmesa'
)


class RenderError(RuntimeError):
    """No way to render here (no display and no offscreen OpenGL); the message says what to do."""


_backend: str | None = None


def has_display() -> bool:
    return bool(os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY'))


def available_render_modes() -> list[str]:
    """Gymnasium render modes possible here: 'rgb_array', and 'human' where a display exists."""
    return ['rgb_array', 'human'] if has_display() else ['rgb_array']


def select_backend() -> str:
    """The OpenGL backend MuJoCo renders with; see the module docstring. Raises RenderError."""
    global _backend
    if _backend is not None:
        return _backend
    chosen = os.environ.get('MUJOCO_GL', '').strip().lower()
    if chosen or has_display() or sys.platform != 'linux':
        _backend = chosen or 'default'
        return _backend
    from mujoco.rendering.classic import gl_context

    errors = []
    for name in OFFSCREEN_BACKENDS:
        try:
            context_cls = importlib.import_module(f'mujoco.{name}').GLContext
            probe = context_cls(1, 1)
            probe.free()
        except Exception as exc:  # a missing library shows up as ImportError, OSError or others
            errors.append(f'{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}')
            continue
        gl_context.GLContext = context_cls
        os.environ['MUJOCO_GL'] = name  # child processes render the same way
        _backend = name
        return name
    raise RenderError(f'no display and no offscreen OpenGL ({"; ".join(errors)}): {INSTALL_HINT}')


def side_camera(lookat: Any, distance: float = 1.2) -> mujoco.MjvCamera:
    """A free camera looking at the leg's plane (world y–z) from the side (along world x)."""
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.lookat[:] = lookat
    cam.distance = distance
    cam.azimuth = 180.0
    cam.elevation = -5.0
    return cam


#: the drawn skeleton: (site or 'foot', site, radius m, rgba); the leg model has masses and sites
#: but no geoms, so links and actuators are drawn into the scene as capsules
SKELETON = (
    ('base_origin', 'thigh_origin', 0.012, (0.5, 0.5, 0.5, 1.0)),
    ('thigh_origin', 'calf_origin', 0.014, (0.75, 0.75, 0.78, 1.0)),
    ('calf_origin', 'foot', 0.012, (0.75, 0.75, 0.78, 1.0)),
    ('maa_base', 'maa_end', 0.018, (0.85, 0.25, 0.2, 0.9)),
    ('baa_base', 'baa_end', 0.018, (0.2, 0.45, 0.85, 0.9)),
)


class FrameRenderer:
    """Offscreen RGB frames of the leg (mujoco.Renderer, the side camera, the drawn skeleton)."""

    def __init__(
        self, model: mujoco.MjModel, width: int = WIDTH, height: int = HEIGHT, distance: float = 1.2
    ) -> None:
        select_backend()
        try:
            self._renderer = mujoco.Renderer(model, height, width)
        except Exception as exc:
            raise RenderError(f'cannot render offscreen: {exc}; {INSTALL_HINT}') from None
        self.model = model
        self.distance = distance
        self.camera: mujoco.MjvCamera | None = None
        from equimus_description.leg import load_leg

        geometry = load_leg().geometry
        self._foot = np.array([0.0, -float(geometry.a2) if geometry is not None else -0.25, 0.0])
        names = {model.site(i).name: i for i in range(model.nsite)}
        self._segments = [
            (names[a] if a != 'foot' else -1, names[b] if b != 'foot' else -1, r, np.array(c))
            for a, b, r, c in SKELETON
            if (a in names or a == 'foot') and (b in names or b == 'foot')
        ]
        self._calf = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'calf')

    def _point(self, data: mujoco.MjData, site: int) -> np.ndarray:
        if site >= 0:
            return np.asarray(data.site_xpos[site], float)
        return np.asarray(data.xpos[self._calf] + data.xmat[self._calf].reshape(3, 3) @ self._foot)

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """(height, width, 3) uint8."""
        if self.camera is None:
            hip = data.site_xpos[self._segments[0][1]] if self._segments else np.zeros(3)
            self.camera = side_camera(np.asarray(hip) + (0.0, 0.0, -0.2), self.distance)
        self._renderer.update_scene(data, self.camera)
        scene = self._renderer.scene
        for a, b, radius, rgba in self._segments:
            if scene.ngeom >= scene.maxgeom:
                break
            g = scene.geoms[scene.ngeom]
            mujoco.mjv_initGeom(
                g, mujoco.mjtGeom.mjGEOM_CAPSULE, np.zeros(3), np.zeros(3), np.eye(3).ravel(), rgba
            )
            mujoco.mjv_connector(
                g, mujoco.mjtGeom.mjGEOM_CAPSULE, radius, self._point(data, a), self._point(data, b)
            )
            scene.ngeom += 1
        return self._renderer.render().copy()

    def close(self) -> None:
        self._renderer.close()


class Window:
    """`human` rendering: MuJoCo's passive viewer, synced once per render() at wall-clock pace."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        if not has_display():
            raise RenderError(
                "render_mode='human' needs a display (DISPLAY is not set): use "
                "render_mode='rgb_array' (and gymnasium.wrappers.RecordVideo) instead"
            )
        import mujoco.viewer

        self._viewer = mujoco.viewer.launch_passive(model, data)
        self._last = time.perf_counter()

    def render(self, period: float) -> None:
        self._viewer.sync()
        wait = period - (time.perf_counter() - self._last)
        if wait > 0:
            time.sleep(wait)
        self._last = time.perf_counter()

    def close(self) -> None:
        self._viewer.close()


class EnvRenderer:
    """What a Gymnasium environment's render() does for its render_mode (None, 'rgb_array',
    'human'), over the model and data it is given at each call."""

    def __init__(self, render_mode: str | None, model: mujoco.MjModel, distance: float = 1.2):
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(
                f'render_mode {render_mode!r}: use one of {", ".join(RENDER_MODES)} or None'
            )
        self.mode = render_mode
        self.model = model
        self.distance = distance
        self._frames: FrameRenderer | None = None
        self._window: Window | None = None
        if render_mode == 'human' and not has_display():
            Window(model, mujoco.MjData(model))  # raises the RenderError with the advice

    def render(self, data: mujoco.MjData | None, period: float) -> np.ndarray | None:
        if self.mode is None or data is None:
            return None
        if self.mode == 'rgb_array':
            if self._frames is None:
                self._frames = FrameRenderer(self.model, distance=self.distance)
            return self._frames.render(data)
        if self._window is None:
            self._window = Window(self.model, data)
        self._window.render(period)
        return None

    def close(self) -> None:
        if self._frames is not None:
            self._frames.close()
            self._frames = None
        if self._window is not None:
            self._window.close()
            self._window = None


def write_video(
    path: str | os.PathLike[str], frames: Iterable[np.ndarray], fps: float = RENDER_FPS
) -> Path:
    """Encode RGB frames (H, W, 3 uint8) as H.264 mp4 with imageio-ffmpeg's ffmpeg."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RenderError(
            'writing a video needs imageio-ffmpeg (requirements.txt): run scripts/setup.sh'
        ) from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer: Any = None
    count = 0
    try:
        for frame in frames:
            frame = np.ascontiguousarray(frame, dtype=np.uint8)
            if writer is None:
                h, w = frame.shape[:2]
                writer = imageio_ffmpeg.write_frames(
                    str(path),
                    (w, h),
                    fps=fps,
                    codec='libx264',
                    pix_fmt_out='yuv420p',
                    macro_block_size=8,
                    ffmpeg_log_level='error',
                )
                writer.send(None)  # start ffmpeg
            writer.send(frame)
            count += 1
    finally:
        if writer is not None:
            writer.close()
    if count == 0:
        raise ValueError(f'no frames to write to {path}')
    return path
