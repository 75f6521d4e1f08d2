"""systolica.sim"""
