"""leg_fit.residual_rms: the fit's loss at given parameters, what `equimus adapt` scores the truth
with (a truth that fits worse than the identified set means the data hold an effect the model
lacks)."""

from equimus_description.leg import load_leg
from equimus_identification import data, leg_fit, synth
from equimus_identification import dynamic as D


def test_the_plant_that_made_a_recording_fits_it_and_another_does_not(tmp_path):
    truth = {'actuators.maa.k': 230.0, 'actuators.baa.area': 3.6e-4, 'joints.hip.damping': 0.4}
    sim = synth.simulate_steps(truth, synth.random_steps(4, seed=3), hold_s=1.0)
    synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0)
    rec = data.load_bag(tmp_path / 'bag')
    exps = [data.bag_window(rec, float(rec.t_q[0]), float(rec.t_q[-1]))]
    leg = load_leg()
    own = leg_fit.residual_rms(exps, leg, {n: D.leg_value(sim['leg'], n) for n in leg_fit.NAMES})
    other = leg_fit.residual_rms(exps, leg, {n: D.leg_value(leg, n) for n in leg_fit.NAMES})
    assert own < 3e-3 and other > 5 * own, (own, other)
