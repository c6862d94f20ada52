"""Offscreen rendering, camera observations and MP4 recording (real EGL/OSMesa)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.envs import MujocoScene, RenderingUnavailable, VideoRecorder


def _rendering_works() -> str | None:
    scene = MujocoScene()
    try:
        scene.render(None, width=16, height=16)
    except RenderingUnavailable as exc:
        return str(exc)
    finally:
        scene.close()
    return None


_NO_GL = _rendering_works()
pytestmark = pytest.mark.skipif(
    _NO_GL is not None, reason=f"no OpenGL backend works here: {_NO_GL}"
)


# A light two-link arm: rendering speed on a software GL does not depend on test meshes.
TWO_LINK = """<mujoco>
  <worldbody>
    <body name="base" pos="0 0 0.05">
      <geom type="cylinder" size=".05 .05" rgba=".2 .4 .8 1"/>
      <body name="upper" pos="0 0 .05">
        <joint name="shoulder_pan" axis="0 0 1" damping="1"/>
        <geom type="capsule" fromto="0 0 0 .25 0 0" size=".025" rgba=".9 .7 .1 1"/>
        <body name="lower" pos=".25 0 0">
          <joint name="elbow_flex" axis="0 0 1" damping="1"/>
          <geom type="capsule" fromto="0 0 0 .2 0 0" size=".02" rgba=".9 .5 .1 1"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="shoulder_pan" joint="shoulder_pan" kp="20" ctrlrange="-3 3"/>
    <position name="elbow_flex" joint="elbow_flex" kp="20" ctrlrange="-3 3"/>
  </actuator>
</mujoco>"""


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> MujocoScene:
    xml = tmp_path_factory.mktemp("models") / "two_link.xml"
    xml.write_text(TWO_LINK)
    scene = MujocoScene()
    scene.add_robot("arm", str(xml))
    scene.add_object("cube", size=(0.03, 0.03, 0.03), pos=(0.2, -0.2, 0.03), rgba=(1, 0, 0, 1))
    scene.add_camera("front", pos=(0.8, -0.8, 0.6), lookat=(0.1, 0.0, 0.1))
    yield scene
    scene.close()


def test_a_packaged_robot_renders() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    scene.add_camera("front", pos=(0.5, -0.5, 0.4), lookat=(0.0, 0.0, 0.15))
    image = scene.render("front", width=64, height=48)
    empty = MujocoScene()
    empty.add_camera("front", pos=(0.5, -0.5, 0.4), lookat=(0.0, 0.0, 0.15))
    assert np.abs(image.astype(int) - empty.render("front", width=64, height=48)).sum() > 1000
    scene.close()
    empty.close()


def test_render_returns_an_rgb_image_of_the_requested_size(scene: MujocoScene) -> None:
    image = scene.render("front", width=320, height=240)
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8
    assert image.std() > 5  # not a constant frame
    free = scene.render(None, 64, 48)  # MuJoCo's free camera; positional sizes
    assert free.shape == (48, 64, 3) and free.std() > 5


def test_render_shows_what_changed(scene: MujocoScene) -> None:
    before = scene.render("front", width=160, height=120).astype(int)
    scene.move_object("cube", (0.0, -0.3, 0.03))
    after = scene.render("front", width=160, height=120).astype(int)
    scene.move_object("cube", (0.2, 0.1, 0.03))
    assert np.abs(after - before).sum() > 1000


def test_render_larger_than_the_default_framebuffer(scene: MujocoScene) -> None:
    assert scene.render("front", width=800, height=600).shape == (600, 800, 3)


def test_render_refuses_bad_cameras_and_sizes(scene: MujocoScene) -> None:
    with pytest.raises(ValueError, match=r"camera='back': no such camera \(cameras: \['front'\]"):
        scene.render("back")
    with pytest.raises(ValueError, match="width=0: must be a positive whole number of pixels"):
        scene.render("front", width=0)
    with pytest.raises(ValueError, match="height=2.5: must be a positive whole number of pixels"):
        scene.render("front", height=2.5)  # type: ignore[arg-type]


def test_render_from_a_worker_thread_and_the_caller(scene: MujocoScene) -> None:
    images: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                images.append(scene.render("front", width=64, height=48))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    main = scene.render("front", width=64, height=48)
    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=60)
    assert errors == [] and len(images) == 3
    # same scene, own GL context per thread (anti-aliasing may differ by a few levels)
    assert np.abs(images[0].astype(int) - main).mean() < 1.0
    again = scene.render("front", width=64, height=48)
    assert np.abs(again.astype(int) - main).mean() < 1.0


def test_env_observations_carry_camera_images(scene: MujocoScene) -> None:
    env = scene.make_env("arm", cameras=["front"], image_size=(48, 64))
    assert env.env_spec.capabilities.images
    obs = env.reset()
    assert obs["images"]["front"].shape == (48, 64, 3)
    first = obs["images"]["front"]
    for _ in range(10):
        obs = env.step({"shoulder_pan": 1.5, "elbow_flex": -1.5}).observation
    assert obs["images"]["front"].shape == (48, 64, 3)
    assert not np.array_equal(first, obs["images"]["front"])


def _decode(path: Path) -> tuple[int, tuple[int, int], float]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        rate = float(stream.average_rate)
    return len(frames), frames[0].shape[:2], rate


def test_video_recorder_writes_an_mp4_that_decodes(scene: MujocoScene, tmp_path: Path) -> None:
    env = scene.make_env("arm")
    env.reset()
    path = tmp_path / "sub" / "episode.mp4"
    recorder = VideoRecorder(path, fps=25, width=160, height=120, camera="front", scene=scene)
    for _ in range(12):
        env.step({"shoulder_pan": 0.8})
        recorder.add_frame()
    assert recorder.close() == 12
    assert recorder.close() == 12  # idempotent
    count, shape, rate = _decode(path)
    assert count == 12 and shape == (120, 160) and rate == pytest.approx(25.0)


def test_video_recorder_pads_odd_sizes_and_takes_given_frames(
    scene: MujocoScene, tmp_path: Path
) -> None:
    path = tmp_path / "odd.mp4"
    with VideoRecorder(path, fps=10.0, width=33, height=21, camera=None, scene=scene) as recorder:
        recorder.add_frame()
        recorder.add_frame(np.zeros((21, 33, 3), np.uint8))
        with pytest.raises(ValueError, match="image: must be a 21x33x3 uint8 array"):
            recorder.add_frame(np.zeros((20, 33, 3), np.uint8))
    count, shape, _ = _decode(path)
    assert count == 2 and shape == (22, 34)
    with pytest.raises(RuntimeError, match="is closed"):
        recorder.add_frame()


def test_video_recorder_probes_its_camera_and_parameters_up_front(
    scene: MujocoScene, tmp_path: Path
) -> None:
    path = tmp_path / "bad.mp4"
    with pytest.raises(ValueError, match=r"camera='wrist': no such camera \(cameras: \['front'\]"):
        VideoRecorder(path, fps=30, width=64, height=48, camera="wrist", scene=scene)
    with pytest.raises(ValueError, match="fps=0: must be a positive finite number"):
        VideoRecorder(path, fps=0, width=64, height=48, camera="front", scene=scene)
    with pytest.raises(ValueError, match="width=-1: must be a positive whole number"):
        VideoRecorder(path, fps=30, width=-1, height=48, camera="front", scene=scene)
    with pytest.raises(ValueError, match=r"path=.*video.avi.*must end in \.mp4"):
        VideoRecorder(
            tmp_path / "video.avi", fps=30, width=64, height=48, camera="front", scene=scene
        )
    assert not path.exists()  # nothing was created by a refused recorder
