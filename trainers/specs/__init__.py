"""The built-in trainers' declarations, one torch-free module per trainer
(``TRAINER = TrainerDef(...)``, see ``trainers/spec.py``); the module name is the
trainer's name. A trainer of your own declares itself in a module of your own and
names it in its conf file (``module: mysite.mytrainer``)."""
