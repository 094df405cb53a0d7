"""
ArviZ export of a :class:`~pyro_subnet.SubnetworkLaplacePosterior`, so that ``az.loo`` and
``az.compare`` can rank it against MAP, MCMC or parallel tempering on the same data.
"""

import torch


def to_inference_data(posterior, *args, num_samples=500, **kwargs):
    r"""
    Draws ``num_samples`` latent vectors from a subnetwork Laplace posterior and returns an
    :class:`arviz.InferenceData` with groups

    - ``posterior``: every latent site (constrained), one chain of ``num_samples`` draws;
    - ``log_likelihood``: the pointwise log-likelihood of each observed site at each draw
      (the network itself, not its linearization);
    - ``posterior_predictive``: one draw of each observed site per posterior draw;
    - ``observed_data``: the observed values.

    Example::

        idata = to_inference_data(posterior, x, y, num_samples=1000)
        az.loo(idata)

    :param SubnetworkLaplacePosterior posterior: from ``guide.laplace_approximation``.
    :param args: the model's arguments, including the observed data.
    :param int num_samples: number of posterior draws.
    :returns: ``arviz.InferenceData``
    """
    import arviz as az

    from .posterior import SubnetworkLaplacePosterior

    if not isinstance(posterior, SubnetworkLaplacePosterior):
        raise TypeError(
            "to_inference_data expects the SubnetworkLaplacePosterior returned by "
            f"guide.laplace_approximation(...), got {type(posterior).__name__}"
        )
    if not (isinstance(num_samples, int) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    latent = posterior._latent
    post, pred, loglik, observed = {}, {}, {}, {}
    with torch.no_grad():
        for u in posterior.get_posterior().sample((num_samples,)):
            tr, _ = latent.trace(u, args, kwargs)
            for name in latent.latent_names:
                post.setdefault(name, []).append(tr.nodes[name]["value"])
            for name in latent.observed:
                site = tr.nodes[name]
                if not site["is_observed"]:
                    raise ValueError(
                        f"observed site '{name}' has no data in this call; pass the model's "
                        "arguments including the observed values, e.g. to_inference_data(posterior, x, y)"
                    )
                observed[name] = site["value"]
                loglik.setdefault(name, []).append(site["fn"].log_prob(site["value"]))
                pred.setdefault(name, []).append(site["fn"].sample())

    def stack(d):
        return {k: torch.stack(v)[None].cpu().numpy() for k, v in d.items()}

    return az.from_dict(
        posterior=stack(post),
        posterior_predictive=stack(pred),
        log_likelihood=stack(loglik),
        observed_data={k: v.cpu().numpy() for k, v in observed.items()},
    )
